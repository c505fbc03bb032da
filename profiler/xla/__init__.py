"""XLA's own outputs, read without XLA: HLO text and protos, buffer assignments, dump folders,
the compiler's host-offload plan, GPU target descriptions, the NVTX range names XLA writes (``names``).

Nothing here imports JAX at module level; the few helpers that compile (``aot``)
or ask jaxlib for a cost analysis (``costs``) import it when called.
"""
