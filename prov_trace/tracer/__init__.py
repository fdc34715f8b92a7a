"""The tracer: target resolution, event backends, and the session that ties them to a stream."""
