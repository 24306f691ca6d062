"""rangekv.bench: Python benchmark drivers (``python -m rangekv.bench <workload>``).

    ttft-hf   TTFT of one prefix+suffix request through rangekv.hf (the paper's Table 3)
    serve     client TTFT through a real vLLM OpenAI server with the RangeKV connector: the
              fixed request, a multi-request document-QA workload, break-even against prefix
              length (serve.py, serve_workloads.py, harness.py: what they share; plots.py draws
              the JSON, and `rangekv bench restore|store --plot FILE.png`'s)
"""
