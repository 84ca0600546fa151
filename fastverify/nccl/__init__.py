"""NCCL's own output, read in one place (`loglines`). NCCL facts that are not SGLang's live
here rather than under fastverify.sglang: preflight reads them with no SGLang in play."""
