"""Ctrl-C at a chosen import: `python interrupt_at_import.py MODULE TRAIN_PY ARGS...` runs train.py with ARGS and sends
itself SIGINT when MODULE is about to be imported (numpy.linalg: inside torch's import of numpy), the moment a user's
Ctrl-C in the first seconds of a command can land on."""

import os
import runpy
import signal
import sys

MODULE, TRAIN_PY = sys.argv[1:3]


class InterruptAtImport:
    fired = False

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == MODULE and not InterruptAtImport.fired:
            InterruptAtImport.fired = True
            os.kill(os.getpid(), signal.SIGINT)
        return None  # the import goes on as usual


sys.meta_path.insert(0, InterruptAtImport())
sys.argv = [TRAIN_PY, *sys.argv[3:]]
runpy.run_path(TRAIN_PY, run_name="__main__")
