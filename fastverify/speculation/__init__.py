"""Does speculation pay on this host, at which batch sizes, with which adaptive config.

- `curve`: accepted-drafts histograms (SGLang's `spec_correct_drafts_histogram`) -> the
  accept length L(k) at every step count up to the measured one (topk 1: a chain).
- `acceptance`: a bench's per-request histograms: their cluster-bootstrap interval, a stated
  lower acceptance, draws per verify pass.
- `costs`: what a decode pass (baseline, the steps-0 pass, k steps) and a prefill forward
  cost per batch size, from the engine (the sim's published model), a `rehearse` grid or
  `spec costs` trials; only measured rows, each table saying where it came from.
- `replay`: SGLang's adaptive controller run on the recorded acceptance, time-averaged.
- `design`: the tier configs SGLang's controller holds (and steps down from, with
  hysteresis) and the choice per batch size.
- `serving`: the end-to-end prediction of a closed-loop workload (prefill, TTFT, ITL).
- `memory`: the drafter's and the graphs' memory, whether a config fits.
- `plan`: all of it for one host and workload, and SGLang's `--speculative-adaptive-config`.
- `breakeven`: the break-even accept length, one computation for every figure.
"""
