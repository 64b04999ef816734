"""``nmt serve``: models behind an HTTP API, decoded with continuous batching (docs/serving.md).

``loop`` owns each model and its running batch; ``requests`` reads what clients send; ``api``
is the FastAPI application; ``server`` loads the models and runs uvicorn. Needs the ``serve`` extra.
"""
