"""What happens between a user's command and `Trainer.fit`, starting with the checks that need no model code.

Nothing here may import torch or Lightning at module level: `launch.precheck` runs before those imports, so that a
typo or a wrong value is refused within a second or two instead of after ten seconds of imports.
"""
