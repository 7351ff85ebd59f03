#!/bin/sh
# tf_python.sh [--find DIR | --install DIR]: prints the path of a Python interpreter that imports TensorFlow.
#
# --find (make tf-op) looks at, in order: $TF_PY; python3 / python on PATH; DIR/bin/python
# (default build/tf-venv). --install (make test-tf) uses $TF_PY when set, else DIR/bin/python,
# creating a virtual environment in DIR and installing a CPU TensorFlow from PyPI into it when it
# does not import tensorflow (tensorflow-cpu, or tensorflow where no -cpu wheel exists): the
# package is then pip-installed there, never into a system Python.
# Messages go to stderr; stdout holds only the interpreter's path.
set -u
has_tf() { "$1" -c 'import tensorflow' >/dev/null 2>&1; }
say() { echo "tf_python.sh: $*" >&2; }

if [ -n "${TF_PY:-}" ]; then
  has_tf "$TF_PY" || { say "TF_PY=$TF_PY cannot import tensorflow"; exit 1; }
  echo "$TF_PY"; exit 0
fi
install=0
dir=build/tf-venv
case "${1:-}" in
  --install) install=1; dir=${2:-$dir} ;;
  --find) dir=${2:-$dir} ;;
esac
if [ "$install" = 0 ]; then
  for py in python3 python; do
    p=$(command -v "$py" 2>/dev/null) || continue
    if has_tf "$p"; then echo "$p"; exit 0; fi
  done
fi
if [ -x "$dir/bin/python" ] && has_tf "$dir/bin/python"; then echo "$dir/bin/python"; exit 0; fi
if [ "$install" = 0 ]; then
  say "no Python that imports tensorflow (set TF_PY=/path/to/python, or run 'make test-tf', which installs one into $dir)"
  exit 1
fi

base=$(command -v python3 2>/dev/null) || { say "python3 not found"; exit 1; }
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
say "no importable tensorflow: installing a CPU TensorFlow from PyPI into $dir"
if "$base" -m venv "$dir" >&2 2>/dev/null && [ -x "$dir/bin/python" ] && "$dir/bin/python" -m pip --version >/dev/null 2>&1; then
  py="$dir/bin/python"
  pip_target=""
else
  # No venv module (e.g. Debian without python3-venv): pip --target into DIR/site and a small
  # wrapper DIR/bin/python that puts it on PYTHONPATH.
  say "python3 -m venv unavailable; installing with pip --target $dir/site instead"
  "$base" -m pip --version >/dev/null 2>&1 || { say "neither venv nor pip available for $base (install python3-venv)"; exit 1; }
  rm -rf "$dir/bin" && mkdir -p "$dir/bin" "$dir/site"
  printf '#!/bin/sh\nPYTHONPATH="%s/site${PYTHONPATH:+:$PYTHONPATH}" exec "%s" "$@"\n' "$dir" "$base" > "$dir/bin/python"
  chmod +x "$dir/bin/python"
  py="$dir/bin/python"
  pip_target="--target $dir/site"
fi
pipi() { "$base" -m pip install -q --disable-pip-version-check $pip_target "$@" >&2; }
[ -z "$pip_target" ] && pipi() { "$py" -m pip install -q --disable-pip-version-check "$@" >&2; }
pipi tensorflow-cpu numpy || pipi tensorflow numpy || { say "pip could not install TensorFlow for $("$base" --version 2>&1)"; exit 1; }
has_tf "$py" || { say "TensorFlow installed but 'import tensorflow' fails with $py"; exit 1; }
echo "$py"
