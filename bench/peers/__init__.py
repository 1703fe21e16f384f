"""ropenorm against its peers, timed side by side in one process on one GPU.

Run from the repository root as ``python3 -m bench.peers`` (``scripts/bench`` does so after the
C++ benchmark). For each op and shape it runs ropenorm's torch ops and the peers that are
importable (torch eager with the Hugging Face formulas, ``torch.nn.functional.rms_norm``,
``torch.compile`` of the eager formulas, Liger-Kernel, FlashInfer), forward and forward +
backward, with ropenorm's in-place forward forms beside the peers that work in place, checks
every output against a float64 reference in output ulps, times it (cold-L2 CUDA-event medians
for large shapes, CUDA-graph replay for small ones) against the copy bandwidth measured in the
same run, and writes receipts (JSON, CSV, re-read and checked) and a plot to
``bench/results/peers-<device>.*``.

Modules: ``cli`` (the run), ``ops`` (shapes, inputs, bytes model, references per op),
``impls`` (the implementations), ``formulas`` (the Hugging Face formulas and the cos/sin cache),
``reference`` (float64 references), ``ulp`` (the error measure), ``timing`` (copy bandwidth,
cold-L2 and graph timing), ``device`` (machine facts), ``receipt`` (write and re-read),
``summary`` (ratios and tables), ``plot``. Only ``cli``, ``impls``, ``ops``, ``timing`` and
``device`` need a GPU; ``receipt`` and ``summary`` need neither torch nor a GPU.
"""
