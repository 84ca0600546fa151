"""NCCL tuning profiles: strict env-file format, NCCL-grammar validation, lookup, effective env.

Modules: model (types), envfile (parser), nccl_vars (known variables), validate,
store (lookup + extends), effective (clean env + NCCL config files), diff,
sitecustomize (legacy import), topology (nvidia-smi topo -m), doctor.
"""
