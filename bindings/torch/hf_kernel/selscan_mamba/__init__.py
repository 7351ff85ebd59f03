"""selscan-mamba: selscan's Mamba kernels as a Hugging Face `kernels` repository.

The functions under mamba_ssm's and causal_conv1d's names and signatures (they are
selscan_torch's own):

    selective_scan_fn, selective_state_update, mamba_inner_fn,             (mamba_ssm)
    mamba_chunk_scan_combined, mamba_split_conv1d_scan_combined
    causal_conv1d_fn, causal_conv1d_update                                 (causal_conv1d)

and `layers`: one stateless nn.Module per kernel entry point of transformers' Mamba models, named
as transformers' kernel mapping names them: Mamba-1 (MambaForCausalLM, FalconMambaForCausalLM)
"selective_scan_fn", "selective_state_update", "mamba_inner_fn", "causal_conv1d_fn",
"causal_conv1d_update"; Mamba-2 (Mamba2, Bamba, FalconH1, GraniteMoeHybrid, NemotronH, Zamba2)
"mamba_chunk_scan_combined", "mamba_split_conv1d_scan_combined", "selective_state_update",
"causal_conv1d_fn", "causal_conv1d_update"; for `kernels.kernelize` through a LocalLayerRepository.

A pure-Python (noarch) kernel: the compiled code is the selscan_torch package, installed
separately (`pip install --no-build-isolation ./bindings/torch` in selscan's repository). This
file is copied into each build variant by bindings/torch/hf_kernel/generate.py (`make hf-kernel`).
"""
try:
    import selscan_torch as _selscan_torch  # noqa: F401
except ImportError as e:  # kernels' python-depends lists only its curated packages: checked here
    raise ImportError(
        "the selscan-mamba kernel runs on the selscan_torch package, which is not installed in this "
        "environment: `pip install --no-build-isolation ./bindings/torch` from selscan's repository"
    ) from e

from selscan_torch import (  # noqa: E402
    causal_conv1d_fn,
    causal_conv1d_update,
    mamba_chunk_scan_combined,
    mamba_inner_fn,
    mamba_split_conv1d_scan_combined,
    selective_scan_fn,
    selective_state_update,
)

from . import layers  # noqa: E402

__all__ = [
    "selective_scan_fn",
    "selective_state_update",
    "mamba_inner_fn",
    "causal_conv1d_fn",
    "causal_conv1d_update",
    "mamba_chunk_scan_combined",
    "mamba_split_conv1d_scan_combined",
    "layers",
]
