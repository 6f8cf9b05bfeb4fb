"""The vLLM serving A/B and the GSM8K check: programs that drive a running vLLM server.

Apart from the GEMM microbenchmark (:mod:`spx.bench`): these start ``vllm serve`` processes and talk
to them over HTTP; nothing here imports vLLM or torch.

- :mod:`spx.serving.commands` — the argv of ``vllm serve`` / ``vllm bench serve`` (the seed's protocol), pure;
- :mod:`spx.serving.server` — one server process group: start, ``/health``, stop, its log's last error;
- :mod:`spx.serving.gpus` — whether the GPUs are free after an arm;
- :mod:`spx.serving.point` — one ``vllm bench serve`` run and its saved JSON;
- :mod:`spx.serving.gsm8k` — the GSM8K data set shipped with spx and its client;
- :mod:`spx.serving.ab` — the arms in order (:class:`~spx.serving.ab.ArmRunner`) and the result documents;
- ``python -m spx.serving`` — the command (``spx serving`` calls it).
"""
