"""The Coordinator gRPC service: registry, round planning and config push over Redis (wiring only;
the logic is in ``edgetune.control`` and ``edgetune.planning``). Entry point: ``server.main`` / ``edgetune serve coordinator``."""
