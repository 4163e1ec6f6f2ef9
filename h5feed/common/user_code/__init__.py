"""The user's code as both sides see it: import paths, module identities, the trainer's
``__main__``, and the kinds of source."""
