"""rangekv.bench: Python benchmark drivers (``python -m rangekv.bench <workload>``).

    ttft-hf   TTFT of one prefix+suffix request through rangekv.hf (the paper's Table 3)
"""
