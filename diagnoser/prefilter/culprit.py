"""Name the culprit node, GPU and rank from the decisive matches.

A kernel Xid names a PCI bus id on a node; NCCL's init lines say which rank ran on that GPU. An
IB error on many ranks names the same peer IP; the bootstrap lines say which node owns that IP (one
rank naming one peer is not enough: the broken end of that connection could be either).
"""

from __future__ import annotations

import re
from collections import Counter

from diagnoser.collect.nccl import normalize_bus_id
from diagnoser.models import Culprit, SignatureMatch
from diagnoser.prefilter.matching import Topology

MAX_LISTED = 64  # a culprit list longer than this is not a culprit, it is the whole job
MIN_PEER_REPORTERS = 2  # processes that must name the same peer before it is the culprit
# the GPU a hardware line is about, where its signature captured none: the kernel's dev_printk prefix
# of the GPU drivers ("amdgpu 0000:83:00.0: ...", "nvidia 0000:3b:00.0: PCIe Bus Error"), NVRM's "GPU at
# PCI:0000:3b:00" and "The NVIDIA GPU 0000:b3:00.0", and "PCI:0000:ae:00" as GPU health agents print it.
# A PCIe port's own address ("pcieport 0000:00:01.0") is the port, never the GPU
GPU_ADDRESS = re.compile(
    r"(?:\b(?:amdgpu|nvidia) |\bNVRM: GPU at |\bNVIDIA GPU |\bPCI:)"
    r"(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\b")


# what people paste in place of a host name they hide ("ip: xxx", "node ***", "<redacted>", "[monitor-ip]",
# "{hostname}"): a redaction names no node. It is still a line about some other node, so the file's own node (a
# head node reporting a worker, a controller reporting a node) is not named in its place either
REDACTED_NAME = re.compile(
    r"(?i)^(?:[x*#?._:-]+|<[^>]*>|\{[^}]*\}|\[[^\]]*\]|redacted|hidden|masked|hostname|host|node|ip|unknown|none|null|n/a)$")


def named_node(fields: dict[str, str]) -> str | None:
    """The node a signature captured, unless it is a redaction placeholder."""
    node = fields.get("node")
    return node if node and not REDACTED_NAME.match(node) else None


def gpu_id(raw: str) -> str:
    """A GPU as a signature captured it, in the one form culprits and placements use (bus ids normalised)."""
    return normalize_bus_id(raw) if ":" in raw else raw


def locate(matches: list[SignatureMatch], topo: Topology, hardware: bool = False, connection: bool = False) -> Culprit:
    """`hardware`: also name the GPU a culprit rank ran on (from NCCL's topology). `connection`: the rule is
    about a connection between processes (its signatures can name the peer)."""
    nodes: list[str] = []
    ranks: list[int] = []
    gpus: list[str] = []
    peers = Counter(m.fields["peer"] for m in matches if m.fields.get("peer"))
    # a node the failure line names explicitly ("Node failure on gpu-003") beats the node of the
    # file or process that reported it (the batch host's slurmstepd, a peer's NCCL thread)
    named = any(m.fields.get("node") for m in matches)
    # reports that name *another* rank ("Rank 3 ... but Rank 5 is running ...") vote for it
    others = Counter(int(m.fields["rank"]) for m in matches if m.fields.get("rank", "").isdigit()
                     and m.record.rank is not None and int(m.fields["rank"]) != m.record.rank)

    def add(seq: list, value: object) -> None:
        if value is not None and value not in seq:
            seq.append(value)

    for m in matches:
        rec, f = m.record, m.fields
        node = named_node(f) or (None if named else rec.node)
        rank = int(f["rank"]) if f.get("rank", "").isdigit() else rec.rank
        gpu = gpu_id(f["gpu"]) if f.get("gpu") else None
        if gpu is None and hardware:
            # the line itself, else (kernel lines) the head of the multi-line NVRM message it continues
            texts = (rec.text, *rec.context) if rec.kind == "dmesg" else (rec.text,)
            gpu = next((gpu_id(a["bdf"]) for t in texts if (a := GPU_ADDRESS.search(t))), None)
        if rank is None and gpu and ":" in gpu:
            rank = topo.rank_of_gpu(node, gpu)
        if rank is None and f.get("pid", "").isdigit():
            rank = topo.rank_of_pid(node, int(f["pid"]))
        if rank is None and node and rec.local_rank is not None:
            rank = topo.rank_of_device(node, rec.local_rank)
        if node is None and rank is not None:
            node = topo.node_of_rank(rank)
        if gpu is None and hardware and rank is not None and rank in topo.placements:
            gpu = topo.placements[rank].bus_id
        if not peers:
            add(nodes, node)
        add(ranks, rank)
        add(gpus, gpu)
    voted = False
    if others:
        top_rank, votes = others.most_common(1)[0]
        if votes * 2 > len(matches):  # a majority of the reports name the same odd one out
            voted = True
            ranks = [top_rank]
            node = topo.node_of_rank(top_rank)
            nodes = [node] if node else nodes
    if connection and not peers and not named and not voted:
        # a connection broke and no report names the other end (old NCCL prints no peer in its IB completion
        # errors): the reporting end is no more to blame than the silent one, so neither its node nor its
        # rank is named (when both ends report it, naming both would be the whole link)
        nodes, ranks = [], []
    if peers:
        # reporters name the broken peer; the most named peer is the culprit, mapped to its node. A peer
        # only one reporter names says only that the connection between them broke: either end may be at
        # fault, so nobody is named (one process losing several peers points at itself if at anything)
        top, count = peers.most_common(1)[0]
        reporters = {(m.record.source, m.record.rank, m.record.node) for m in matches if m.fields.get("peer") == top}
        if len(reporters) < MIN_PEER_REPORTERS:
            pass
        elif count >= max(1, sum(peers.values()) // 2):
            add(nodes, topo.node_ips.get(top.split("<")[0], top.split("<")[0]))
        else:
            # no peer stands out: one node whose processes lost many peers points at itself (its port or
            # HCA); reporters on several nodes naming each other localise nothing (fabric or configuration)
            reporting = {n for m in matches
                         if (n := m.fields.get("node") or m.record.node) and not REDACTED_NAME.match(n)}
            if len(reporting) == 1:
                nodes = list(reporting)
        ranks = []  # the reporting ranks are victims, not culprits
    return Culprit(nodes=nodes[:MAX_LISTED], ranks=sorted(ranks)[:MAX_LISTED], gpus=gpus[:MAX_LISTED])
