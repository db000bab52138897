"""Integrations of edgetune with other frameworks, each an optional extra.

- ``flower``  a Flower strategy wrapper that plans every round with the coordinator and a
              client wrapper that runs local training in the planned power mode
              (``pip install edgetune[flower]``)
"""
