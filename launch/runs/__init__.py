"""Where a run lives and what runs it: its directory and the lock that keeps a second writer out (run_directory),
the worker slots of a parallel multirun (worker_slots), the replicas of one process (replicas)."""
