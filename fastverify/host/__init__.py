"""Facts about the host the GPUs sit in, read before anything loads: the PCIe path between
GPUs (ACS, IOMMU, `nvidia-smi topo -p2p`, NUMA) and the host fingerprint that keys every
recorded result to the hardware and software it was measured on."""
