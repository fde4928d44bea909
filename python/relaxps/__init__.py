"""relaxps: the Python client of the relaxps parameter server.

    import numpy as np, relaxps
    with relaxps.Client("tcp://127.0.0.1:5555") as client:
        client.create_table("w", 1000, optimizer="sgd", lr=0.1)
        w = np.empty(1000, np.float32)
        client.pull("w", w)               # fills w in place
        client.push_pull("w", grads, w)   # sends grads, receives the new w
        client.clock()

Arrays are float32 (ids: uint64 or non-negative int64), C-contiguous numpy
arrays, CPU torch tensors or other objects with the buffer protocol; they are
used in place, never copied: push* read the caller's memory, pull* write into
it. Every blocking call releases the GIL. A failed call raises a subclass of
relaxps.Error (InvalidArgument, NotFound, Unavailable, DeadlineExceeded,
Aborted, ...) whose message is the client's Status message. See
relaxps.torch for keeping a torch.nn.Module's parameters on the servers.
"""

from relaxps._relaxps import (  # noqa: F401
    Aborted,
    Client,
    Corruption,
    DeadlineExceeded,
    Error,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    IOError,
    NotFound,
    PermissionDenied,
    Request,
    Unavailable,
    WrongShard,
    pending_buffers,
    release_buffers,
)

# Errors a trainer rides through by exiting for a restart (the C++ worker's
# exit status 3): the parameter server failed, not the trainer.
PS_FAILURES = (Unavailable, DeadlineExceeded, Aborted)

__all__ = [
    "Aborted", "Client", "Corruption", "DeadlineExceeded", "Error", "FailedPrecondition",
    "Internal", "InvalidArgument", "NotFound", "PermissionDenied", "Request", "Unavailable",
    "WrongShard", "PS_FAILURES",
]
