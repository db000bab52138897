"""The profiler agent (``edgetune.v1.Profiler``), one per Jetson: discover the device, list its
power modes, profile modes x batch sizes into the store, apply and restore power modes (always
restored: see ``safety``), stream power telemetry. Entry point: ``server.main`` /
``edgetune serve profiler``.
"""
