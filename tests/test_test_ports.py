"""The ports tests bind, free and bind again come from this worker's own block (relay_servers.free_ports), below
the kernel's ephemeral range: a port freed there is never handed to another worker's bind(0), so no client still
reconnecting to it can find another test's server there."""

from __future__ import annotations

import socket

from relay_servers import _ephemeral_low, _worker_block, free_port, free_ports


def test_ports_come_from_this_workers_block_below_the_ephemeral_range() -> None:
    block = _worker_block()
    ports = free_ports(4) + [free_port() for _ in range(4)]
    assert len(set(ports)) == 8  # handed out in turn: none twice in a row
    assert all(port in block and port < _ephemeral_low() for port in ports)


def test_a_port_in_use_is_passed_over() -> None:
    first = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        block = _worker_block()
        nxt = block[(block.index(first) + 1) % len(block)]
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: past a TIME_WAIT
        held.bind(("127.0.0.1", nxt))
        held.listen()
        assert free_port() != nxt
