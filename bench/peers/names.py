"""The names the options and receipts use (torch-free, so the skip path needs no torch)."""

OP_NAMES = ("rms_norm", "add_rms_norm", "rope", "qk_norm_rope")
PASSES = ("fwd", "fwd_bwd")
OURS = "ropenorm"
PEER_NAMES = ("torch_eager", "torch_rms_norm", "torch_compile", "liger", "flashinfer")
IMPL_NAMES = (OURS,) + PEER_NAMES
