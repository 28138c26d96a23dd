"""The callbacks that guard a run against what would lose or corrupt it, rather than measure it: a loss term gone NaN
or inf (`NonFiniteLossGuard`: stop, and never checkpoint that state), preemption and Ctrl-C (`SaveOnPreemption`: a
resumable last.ckpt and the signal's exit status), and a DDP process group that hangs or outlives Python
(`CollectiveTimeout`, `ReleaseProcessGroupAtExit`). The NaN guard is in configs/callbacks/default.yaml; the launch side
adds the others to every run (launch/run_builder.py)."""
