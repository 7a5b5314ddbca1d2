"""Node-side inference: what the fine-tune probe runs after training to test the GPU by serving its model.

``decode`` is greedy decoding over a static KV cache whose one-token step is captured in a CUDA graph (the
dynamic cache, eager, on CPUs and for architectures the static cache does not take); ``roofline`` counts the
bytes a decode step must read and the FLOPs a prefill executes, the figures the judges turn into MBU and MFU
against the SKU's datasheet; ``bench`` is the measurement plan of one model (time to first token, batch-1
and batched decode, graph against eager, answers to the test split); ``quality`` scores the answers.
Nothing here judges: it measures and reports, as every probe does.
"""
