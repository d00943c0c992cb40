"""Load generation: drive an OpenAI-compatible streaming server and measure it.

The package is split by process. Modules the load process imports (``locustfile``, ``dispatch``, ``runner``,
``streaming``, ``records``, ``plan``) never import torch or transformers: ``import locust``
monkey-patches the process with gevent, and a model library running threads inside it would stall
the event loop. Everything that needs a tokenizer (``tokens``) runs in the parent process after the
run. This ``__init__`` imports nothing so that ``python -m quantbench.load.runner`` can let Locust
patch the process before anything else loads sockets or ssl.
"""
