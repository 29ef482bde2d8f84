"""What ``fusion-compile compile`` reports: per-kernel reports and PTX/cubin compiled without a
GPU."""
