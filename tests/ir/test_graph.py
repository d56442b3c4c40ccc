"""The graph's incremental producer/consumer index and node order, against a full scan.

The oracle is the obvious implementation: a plain Python list of nodes edited with
list operations, and look-ups that scan it in order (the last producer wins, each
reader once, readers in list order).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from qconvert.errors import GraphError
from qconvert.ir import Graph, Node, Tensor


def scan_producer(nodes: list[Node], tensor: str) -> Node | None:
    found = None
    for n in nodes:
        if tensor in n.outputs:
            found = n
    return found


def scan_consumers(nodes: list[Node], tensor: str) -> list[Node]:
    return [n for n in nodes if tensor in n.inputs]


def check_against_scan(graph: Graph, reference: list[Node], names: list[str]) -> None:
    assert list(graph.nodes) == reference
    for t in names:
        assert graph.producer(t) is scan_producer(reference, t), t
        assert graph.consumers(t) == scan_consumers(reference, t), t


@pytest.mark.parametrize("seed", range(30))
def test_random_edits_match_a_full_scan(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"t{i}" for i in range(12)]
    graph, reference = Graph(), []
    counter = 0

    def new_node() -> Node:
        nonlocal counter
        counter += 1
        ins = rng.sample(names, rng.randint(0, 3)) + ([""] if rng.random() < 0.1 else [])
        return Node("OP", ins, rng.sample(names, rng.randint(1, 2)), name=f"n{counter}")

    for _ in range(150):
        action = rng.randrange(10)
        if action == 0 or not reference:
            node = new_node()
            graph.add_node(node)
            reference.append(node)
        elif action == 1:
            node, anchor = new_node(), rng.choice(reference)
            graph.add_node(node, before=anchor)
            reference.insert(reference.index(anchor), node)
        elif action == 2:
            node, anchor = new_node(), rng.choice(reference)
            graph.add_node(node, after=anchor)
            reference.insert(reference.index(anchor) + 1, node)
        elif action == 3:
            node = new_node()
            graph.add_node(node, at_start=True)
            reference.insert(0, node)
        elif action == 4:
            dead = rng.sample(reference, min(len(reference), rng.randint(1, 3)))
            graph.remove_nodes(dead)
            reference = [n for n in reference if n not in dead]
        elif action == 5 and len(reference) > 1:
            node, anchor = rng.sample(reference, 2)
            graph.move_after(node, anchor)
            reference.remove(node)
            reference.insert(reference.index(anchor) + 1, node)
        elif action == 6:
            node = rng.choice(reference)
            if node.inputs:
                node.inputs[rng.randrange(len(node.inputs))] = rng.choice(names)
            else:
                node.inputs.append(rng.choice(names))
        elif action == 7:
            rng.choice(reference).inputs = rng.sample(names, rng.randint(0, 3))
        elif action == 8:
            rng.choice(reference).outputs = rng.sample(names, rng.randint(1, 2))
        else:
            node = rng.choice(reference)
            node.outputs.append(rng.choice(names))
            node.inputs.extend(rng.sample(names, 2))
            node.inputs.pop(0)
        if rng.random() < 0.5:  # look-ups between edits and after several edits in a row
            check_against_scan(graph, reference, names)
    check_against_scan(graph, reference, names)


def test_many_insertions_at_one_place_keep_order() -> None:
    """Repeated insertion between the same two nodes exhausts the float gap between
    their keys (about 50 halvings) and forces a renumbering."""
    graph = Graph()
    first = graph.add_node(Node("OP", [], ["a"], name="first"))
    last = graph.add_node(Node("OP", ["a"], ["b"], name="last"))
    reference = [first, last]
    for i in range(200):
        node = graph.add_node(Node("OP", ["a"], [f"c{i}"], name=f"m{i}"), before=last)
        reference.insert(len(reference) - 1, node)
    assert list(graph.nodes) == reference
    assert graph.consumers("a") == reference[1:]


def test_edits_of_a_removed_node_do_not_reach_the_graph() -> None:
    graph = Graph()
    a = graph.add_node(Node("OP", ["x"], ["y"], name="a"))
    graph.remove_nodes([a])
    a.inputs.append("z")
    a.outputs = ["w"]
    assert graph.consumers("x") == [] and graph.consumers("z") == [] and graph.producer("w") is None
    graph.add_node(a)
    assert graph.consumers("z") == [a] and graph.producer("w") is a and graph.producer("y") is None


def test_a_node_belongs_to_one_graph() -> None:
    node = Graph().add_node(Node("OP", [], ["y"], name="a"))
    with pytest.raises(GraphError, match="already in a graph"):
        Graph().add_node(node)


def test_prune_keeps_what_outputs_need() -> None:
    graph = Graph()
    graph.inputs, graph.outputs = ["x"], ["z"]
    keep1 = graph.add_node(Node("OP", ["x"], ["y"], name="keep1"))
    graph.add_node(Node("OP", ["x"], ["dead"], name="drop"))
    keep2 = graph.add_node(Node("OP", ["y"], ["z"], name="keep2"))
    graph.prune()
    assert list(graph.nodes) == [keep1, keep2]
    assert graph.consumers("x") == [keep1]


def full_prune(graph: Graph) -> tuple[list[Node], set[str]]:
    """What prune leaves, by a scan of every node and tensor (prune itself looks only at what
    changed since its last run)."""
    keep, nodes = set(graph.outputs), list(graph.nodes)
    for node in reversed(list(nodes)):
        if not any(o in keep or any(o in n.inputs for n in nodes) for o in node.outputs):
            nodes.remove(node)
    mentioned = {t for n in nodes for t in (*n.inputs, *n.outputs, *n.attrs.get("_intermediates", ()))}
    return nodes, {t for t in graph.tensors if t in mentioned or t in graph.inputs or t in graph.outputs}


@pytest.mark.parametrize("seed", range(30))
def test_prune_after_random_edits_matches_a_full_scan(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"t{i}" for i in range(16)]
    graph = Graph()
    graph.inputs, graph.outputs = ["t0"], ["t15"]
    for t in names:
        graph.add_tensor(Tensor(t, "float32"))
    for i in range(10):
        graph.add_node(Node("OP", rng.sample(names, 2), [names[i + 1]], name=f"n{i}"))
    for step in range(120):
        action = rng.randrange(9)
        nodes = list(graph.nodes)
        if action == 0 or not nodes:
            graph.add_node(Node("OP", rng.sample(names, 2), rng.sample(names, rng.randint(0, 2)), name=f"a{step}"))
        elif action == 1:
            graph.remove_nodes([rng.choice(nodes)])
        elif action == 2:
            rng.choice(nodes).inputs = rng.sample(names, rng.randint(0, 2))
        elif action == 3:
            rng.choice(nodes).outputs = rng.sample(names, rng.randint(1, 2))
        elif action == 4:  # a tensor nobody mentions, through the graph or straight into its dict
            name = rng.choice(names)
            if rng.random() < 0.5:
                graph.add_tensor(Tensor(name, "float32"))
            else:
                graph.tensors[name] = Tensor(name, "float32")
        elif action == 5:  # a tensor a pass stopped mentioning, deleted by the pass itself
            mentioned = {t for n in nodes for t in (*n.inputs, *n.outputs, *n.attrs.get("_intermediates", ()))}
            unused = [t for t in graph.tensors if t not in mentioned and t not in (*graph.inputs, *graph.outputs)]
            if unused:
                del graph.tensors[rng.choice(unused)]
        elif action == 6:
            graph.outputs = rng.sample(names, rng.randint(0, 2))
        elif action == 7:  # an LSTM's intermediates, set once (prune does not see attrs change)
            rng.choice(nodes).attrs.setdefault("_intermediates", rng.sample(names, 1))
        else:
            graph.add_const(rng.choice(names), np.zeros(2, np.float32))
        if rng.random() < 0.4:
            expected_nodes, expected_tensors = full_prune(graph)
            graph.prune()
            assert list(graph.nodes) == expected_nodes
            assert set(graph.tensors) == expected_tensors


def test_prune_under_the_test_suite_names_a_tensor_a_full_scan_would_drop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that renames a tensor straight in ``graph.tensors`` and forgets its readers (the tensor
    count unchanged, nothing the index saw): the incremental prune keeps the new name, a full scan would
    drop it. With QCONVERT_CHECK_EACH_PASS=1 (the test suite) prune says so."""
    graph = Graph()
    graph.inputs, graph.outputs = ["x"], ["z"]
    for t in ("x", "y", "z"):
        graph.add_tensor(Tensor(t, "float32"))
    graph.add_node(Node("OP", ["x"], ["y"], name="a"))
    graph.add_node(Node("OP", ["y"], ["z"], name="b"))
    graph.prune()
    graph.tensors["unread"] = graph.tensors.pop("y")  # a rename that forgot the readers: count unchanged
    monkeypatch.setenv("QCONVERT_CHECK_EACH_PASS", "1")
    with pytest.raises(GraphError, match="prune left tensor 'unread'"):
        graph.prune()
    monkeypatch.setenv("QCONVERT_CHECK_EACH_PASS", "0")
    graph.prune()  # a user's conversion: no check (the tensor would be written, unread)
    assert "unread" in graph.tensors
