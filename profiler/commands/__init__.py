"""The subcommands of ``profile-step``: one module each, with ``add(sub, shared)`` (its parser)
and its ``cmd_*`` function; ``options`` holds what they share.  ``profiler/cli.py`` is the table of them."""
