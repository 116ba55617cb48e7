"""pause: freeze brokers with SIGSTOP; the stop op sends SIGCONT to every broker this
package paused. Jepsen's :pause / :resume (hammer-time).

A paused broker's kernel still completes TCP handshakes and buffers requests until its
listen backlog fills, so clients see connects succeed and requests hang, not refusals."""

from __future__ import annotations

from nemeses.base import COLORS
from nemeses.node_fault import NodeFaultPackage


class PausePackage(NodeFaultPackage):
    name = "pause"
    color = COLORS["pause"]
    past_tense = "paused"
    undo_past_tense = "resumed"

    def fault(self, node: int) -> dict:
        if not self.control.is_alive(node):
            return {"node": node, "not_running": True}
        self.control.pause(node)
        return {"node": node, "pid": self.control.pid(node)}

    def undo(self, node: int) -> dict:
        self.control.resume(node)
        return {"node": node, "pid": self.control.pid(node)}
