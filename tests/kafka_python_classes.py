"""Build every versioned response class of kafka-python 3 once, before any client thread starts.

kafka-python 3 makes the class for a response version on first use, and each such class puts a weak
reference to itself in the registry that decodes responses by API key.  When two client threads use a
version first at the same moment (a group's consumers joining together), both make it; the registry
can keep the one that is then dropped, and from then on every response of that API key in the process
fails to decode (ReferenceError: weakly-referenced object no longer exists).  The client's connection
stops reading and its calls time out.  Built here, single-threaded, each class exists once and lives as
long as the process.  tests/unit/test_kafka_python_classes.py shows both.
"""

from __future__ import annotations


def build_every_response_version() -> None:
    try:
        from kafka.protocol.api_header import ResponseClassRegistry
        import kafka.admin  # noqa: F401  (registers the admin responses too)
        import kafka.consumer  # noqa: F401
        import kafka.producer  # noqa: F401
    except ImportError:  # kafka-python 2 has no such registry and no such race
        return
    for response in list(ResponseClassRegistry._response_class_registry.values()):
        for version in range(response.max_version + 1):
            response[version]
