"""The console: one line per message, through Hydra's handlers under Hydra."""

from __future__ import annotations

import logging


def quiet_console(hydra: bool) -> None:
    """One line per message: no advertising tips; under Hydra, Lightning's messages go through Hydra's
    logging handlers only (Lightning adds its own console handler when imported before Hydra's are set)."""
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda record: "💡 Tip" not in record.getMessage())
    if hydra:
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True


