"""The embedded `sim` engine: an SGLang-compatible SIMULATION for tests and demos.

`python -m fastverify.sim` takes SGLang's launch_server argv and serves SGLang's
endpoints, log lines, metrics and profiler traces with timings from `costmodel` (see
docs/guides/sim.md). Modules: cli_args (argv), engine (lifecycle), startup (its start-up phases),
workers (TP processes), scheduler (decode loop), server (HTTP), metrics, profiler + traces
+ trace_events (kineto files),
sglang_logs (log wording), ncclenv (NCCL_* interpretation), costmodel, wakeup (signals).
It never measures hardware.
"""
