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
it. Every blocking call releases the GIL; push, pull, push_pull, pull_rows
and push_rows also read their reply on the calling thread (Client::Drive in
C++) instead of waiting for the client's I/O thread to hand it over, unless
another thread is driving. A failed call raises a subclass of
relaxps.Error (InvalidArgument, NotFound, Unavailable, DeadlineExceeded,
Aborted, ...) whose message is the client's Status message. See
relaxps.torch for keeping a torch.nn.Module's parameters on the servers.

client.job describes the job: its consistency model, and its recovery
policy by name ("recovery") and by what the policy declares it needs
("recovery_needs": min_servers, experiment_servers, min_replicas,
store_kind, restart, restart_flags, tolerates_server_loss,
tolerates_chain_loss, tolerates_pause, rolls_back). Ask recovery_needs
rather than comparing names: a new policy then needs no change here.
Deprecated, kept for one release and computed from recovery_needs:
job["resends_across_restarts"] (a request whose server died waits for it to
come back) and job["trains_through_server_loss"] (workers train on their own
copies while a server is lost).

client.stats() counts, among others, "acked_updates": this client's push
parts that servers acknowledged (compare with the servers' applied parts of
its worker id and "incarnation" to count acknowledged updates lost), and
"recovery_counters", the recovery policy's own counters by name.
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
    ResourceExhausted,
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
    "Internal", "InvalidArgument", "NotFound", "PermissionDenied", "Request",
    "ResourceExhausted", "Unavailable", "WrongShard", "PS_FAILURES",
]
