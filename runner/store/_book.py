"""`LaunchBook`: the launch queue's one facade, for every caller above the store.

Like procrastinate's `JobManager` over its connector: every layer above the store
(the launch layer's runners, the hosts, sessions, views, the web console, and the
CLI through the host's runtime functions) reaches the queue through this facade,
so what they ask of it is listed here, typed, once. It is the only reader of
`store.launches` outside the store's own modules (tests/unit/store/
test_launch_book_fence.py); the rules stay in the store (guards, transitions,
named queries: domain/_launches.py) and this module adds none. It lives in the
store package, not in `runner.launch`, because the cold views (`wfrun status`,
`wfrun runs`) read launches without loading the launch layer.

    reads        get, query, page, counts, ending_counts, workflow_counts,
                 queued_sources, reservation
    sessions     hand_over (a session ended), hand_back (an agent step goes back)
    a runner's   enqueue, claim, claim_next, check_claim, claim_left, renew_lease,
    transitions  mark_running, park, finish, fail, release, cancel, yield_lease,
                 recover_expired_starting

The lease fence a claim hands the engine (`LeaseFence`) asks the book's `claim_left`;
it lives beside the guard whose rule it rests on (domain/_launch_queries.py).
"""

from __future__ import annotations

from runner.store._interface import LaunchQueue, Store


class LaunchBook:
    """One store's launch queue, as every layer above the store uses it: the queue's own
    methods, handed out once (a call goes straight to the queue, no forwarding hop; each
    is typed and documented where the queue's contract is, `_interface.LaunchQueue`)."""

    def __init__(self, store: Store) -> None:
        queue: LaunchQueue = store.launches
        # -- reads
        self.get = queue.get
        self.query = queue.query
        self.page = queue.page
        self.counts = queue.counts
        self.ending_counts = queue.ending_counts
        self.gate = queue.gate
        self.gate_holders = queue.gate_holders
        self.gate_starts = queue.gate_starts
        self.workflow_counts = queue.workflow_counts
        self.queued_sources = queue.queued_sources
        self.reservation = queue.find_session_reservation
        # -- sessions: a session ended (hand_over); an agent step goes back (hand_back)
        self.hand_over = queue.hand_over
        self.hand_back = queue.hand_back
        # -- a runner's transitions
        self.enqueue = queue.enqueue
        self.claim = queue.claim
        self.claim_next = queue.claim_next
        self.check_claim = queue.check_claim
        self.claim_left = queue.claim_left
        self.renew_lease = queue.renew_lease
        self.mark_running = queue.mark_running
        self.park = queue.park
        self.finish = queue.finish
        self.fail = queue.fail
        self.release = queue.release
        self.cancel = queue.cancel
        self.yield_lease = queue.yield_lease
        self.recover_expired_starting = queue.recover_expired_starting
