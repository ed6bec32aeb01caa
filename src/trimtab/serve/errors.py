"""A refused request of the serve API, the same on both ends of the wire: the daemon raises it, the API answers
with its status and detail, and the client raises it again from that answer."""

from __future__ import annotations


class ServeError(Exception):
    """A refused request: `status` the HTTP status (0 on the client side: the server could not be reached),
    `detail` why, `field` the offending field of the request ("" when it is not about one field)."""

    def __init__(self, status: int, detail: str, field: str = "") -> None:
        super().__init__(f"{detail} ({field})" if field else detail)
        self.status = status
        self.detail = detail
        self.field = field
