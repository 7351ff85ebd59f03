"""README.md's PyTorch program (between <!-- snippet:py:begin --> and <!-- snippet:py:end -->), run as
written, and its results against the float64 reference: what a user copies works and computes the scan."""
import re
from pathlib import Path

import torch

from selscan_torch.reference import selective_scan_ref, selective_state_update_ref

README = Path(__file__).resolve().parents[3] / "README.md"


def _snippet():
    text = README.read_text()
    m = re.search(r"<!-- snippet:py:begin -->\n```python\n(.*?)```\n<!-- snippet:py:end -->", text, re.S)
    assert m, "README.md has no PyTorch snippet between its markers"
    return m.group(1)


def test_readme_pytorch_program(capsys):
    torch.manual_seed(0)
    ns = {}
    exec(compile(_snippet(), str(README), "exec"), ns)
    assert capsys.readouterr().out.strip() == "torch.Size([2, 64, 128]) torch.Size([1, 64, 128]) torch.Size([2, 64])"
    u, delta, A, B, C, D, z, bias = (ns[k].double() for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias"))
    y, last = selective_scan_ref(u, delta, A, B, C, D, z, bias, True, True)
    # float32 kernels against the float64 recurrence: rounding of 2^-24 a step through 128 steps, exp and softplus
    # stays far below 1e-4 of |y|max (~1700 ulps); a wrong recurrence, gate or offset is off by O(|y|)
    tol = 1e-4 * y.abs().max().item()
    assert (ns["y"].double() - y).abs().max().item() <= tol
    assert (ns["last_state"].double() - last).abs().max().item() <= 1e-4 * last.abs().max().item()
    # packed: two sequences, each from a zero state, equal to the scan of each alone
    for s, e in ((0, 50), (50, 128)):
        ys = selective_scan_ref(u[:1, :, s:e], delta[:1, :, s:e], A, B[:1, :, s:e], C[:1, :, s:e])
        assert (ns["y1"].double()[:, :, s:e] - ys).abs().max().item() <= 1e-4 * ys.abs().max().item()
    out, st = selective_state_update_ref(last, u[:, :, -1], delta[:, :, -1], A, B[:, :, -1], C[:, :, -1], D,
                                         z[:, :, -1], bias, True)
    assert (ns["out"].double() - out).abs().max().item() <= 1e-4 * out.abs().max().item()
    assert (ns["state"].double() - st).abs().max().item() <= 1e-4 * st.abs().max().item()
