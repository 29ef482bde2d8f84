"""What every compile and launch path shares, below the driver, templates and tuning: the kernel
cache (content-hashed kernel files), the compiled-module cache and its source stamp, loading a
kernel file (``kernel_loading``: ``CompiledFusion``), the launch mode (GPU or interpreter),
the tuning database, the visible device, and the package version.
"""
