"""The stand-in for AWS of docker-compose.yml (its `aws-stand-in` service, the compose profile `stand-in`) and of the
tests: moto's S3, SQS and Glue server, answering the AWS SDK for Java as S3 does.

    python -m tools.aws_stand_in [-H 127.0.0.1] [-p 5000]

Python's HTTP server answers `Expect: 100-continue` with an interim `100 Continue`, which the AWS SDK for Java's
asynchronous client (S3A's uploads of local files: the de-duplication state's) takes for the final response
(aws/aws-sdk-java-v2#1969), so every state upload failed with "Status Code: 100". That client sends its body without
waiting, so for it the server sends none; boto3, which waits for it, still gets it. moto keeps everything in memory.
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler

__all__ = ["answer_java_without_interim_continue", "main"]


def answer_java_without_interim_continue() -> None:
    """Python's HTTP servers, in this process, send no interim `100 Continue` to the AWS SDK for Java."""
    interim = BaseHTTPRequestHandler.handle_expect_100
    if getattr(interim, "java", False):
        return

    def handle_expect_100(self: BaseHTTPRequestHandler) -> bool:
        return True if "aws-sdk-java" in self.headers.get("User-Agent", "") else interim(self)

    handle_expect_100.java = True  # type: ignore[attr-defined]
    BaseHTTPRequestHandler.handle_expect_100 = handle_expect_100  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    from moto.server import main as serve

    answer_java_without_interim_continue()
    serve(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
