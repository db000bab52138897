"""What every edgetune gRPC service shares: the server bootstrap (health, reflection,
Prometheus metrics, graceful shutdown), error -> status mapping, JSON logs, flag/env config,
list paging and who closes a service's store. One module each; the names most services need are re-exported here.
"""

from edgetune.services.common.config import add_option, add_server_options, server_kwargs, setting
from edgetune.services.common.errors import abort_on_error, map_errors, status_for
from edgetune.services.common.logs import setup_logging
from edgetune.services.common.paging import paginate
from edgetune.services.common.server import ServiceServer, build_server

__all__ = [
    "ServiceServer", "abort_on_error", "add_option", "add_server_options", "build_server", "map_errors",
    "paginate", "server_kwargs", "setting", "setup_logging", "status_for",
]
