"""Does speculation pay on this host, at which batch sizes, with how many steps.

- `curve`: accepted-drafts histograms (SGLang's `spec_correct_drafts_histogram`) -> the
  accept length L(k) at every step count k up to the measured one (topk 1: a chain), and the
  chain model the sim draws acceptance from.
- `costs`: what one decode step and one draft+verify cycle cost per batch size and step
  count, from the engine (the sim's cost model, read from its server info) or from a
  `rehearse` grid measured on a GPU; each cost says where it came from.
- `breakeven`: the break-even accept length, one computation for every figure (the plan's
  per tier and step count too).
- `plan`: per batch-size tier the step count that maximises predicted tokens/s (0 = no
  speculation), its speedup with a 95% interval, what would change the answer, and SGLang's
  `--speculative-adaptive-config` written from it.
"""
