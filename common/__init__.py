"""What models, callbacks and the launch package all use, and which imports none of them: constructor
signatures (`signatures`), the rule for which training steps reach the loggers (`log_steps`) and the adapters
around the private Lightning and torch attributes the collection relies on (`private_api`).
"""
