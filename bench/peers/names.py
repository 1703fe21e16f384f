"""The names the options and receipts use (torch-free, so the skip path needs no torch)."""

OP_NAMES = ("rms_norm", "add_rms_norm", "rope", "qk_norm_rope")
PASSES = ("fwd", "fwd_bwd")
OURS = "ropenorm"
#: ropenorm's in-place forms (forward only), beside the peers that work in place; not a peer.
OURS_IN_PLACE = "ropenorm_in_place"
OUR_NAMES = (OURS, OURS_IN_PLACE)
PEER_NAMES = ("torch_eager", "torch_rms_norm", "torch_compile", "liger", "flashinfer")
IMPL_NAMES = OUR_NAMES + PEER_NAMES
