"""Convert a sentence-transformers BERT encoder exported to ONNX into a BertModel ``save_pretrained`` folder.

:func:`convert_onnx_bert` (``onnx`` imported only then) serves ``minilm-l3`` (:mod:`papa.core.model_packages`). The
graph must hold (any other layout fails):

* named initializers ``<prefix><BertModel name>`` (``model.0.auto_model.`` for minilm-l3) for the embeddings, every
  bias and every LayerNorm (whole ``LayerNormalization`` ops);
* each layer's 6 Linear weights as anonymous ``onnx::MatMul_NNN`` initializers ``[in, out]`` (``nn.Linear``'s
  transposed; Q, K, V separate), each named by its MatMul feeding exactly one Add with the named bias;
* no pooler: it is written as zeros, so ``pooler_output`` is 0 (papa reads hidden states and attention only);
* outputs (minilm-l3): ``onnx::Shape_422`` is ``last_hidden_state``, ``461`` the masked-mean sentence embedding,
  ``output`` / ``463`` copies of ``input_ids`` / ``attention_mask``.

The tokenizer folder's vocabulary must match the word embeddings' rows; the record's ``self_check`` compares the
saved folder with the graph run by onnx's reference evaluator.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from papa.core.errors import PapaError

if TYPE_CHECKING:  # pragma: no cover
    import onnx

#: Bumped when the converter's output changes; a cached folder of another version is rebuilt.
CONVERTER_VERSION = 1
#: The tokenizer files copied into the converted folder.
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
SELF_CHECK_TOLERANCE = 1e-4  # the largest max-abs difference (real tokens) the conversion's self-check accepts
SELF_CHECK_TEXTS = (
    "Short.",
    "A man is playing a guitar on the street.",
    "How much attention depends on the input?",
    "The quick brown fox jumps over the lazy dog while the children watch from the river bank.",
)
ONNX_INSTALL_HINT = "Run `pip install onnx` (or `make install`)."
Tensors = dict[str, np.ndarray]


class ConversionError(PapaError):
    """The ONNX file does not have the layout the converter expects, or fails its self-check."""

    def __init__(self, problem: str, hint: str | None = "This ONNX export has a layout the converter does not know."):
        super().__init__(problem, hint)


def convert_onnx_bert(onnx_path: Path, out_dir: Path, tokenizer_dir: Path) -> dict[str, Any]:
    """Write a BertModel ``save_pretrained`` folder for ``onnx_path`` into ``out_dir``, with ``tokenizer_dir``'s
    :data:`TOKENIZER_FILES`; the conversion record (version, weight map, outputs, pooler, self-check). A
    :class:`ConversionError` for another layout or vocabulary size, or a failed self-check."""
    try:
        import onnx
    except ImportError:
        raise PapaError(
            "Converting an ONNX export to a BertModel needs the package onnx, which is not installed", ONNX_INSTALL_HINT
        ) from None
    proto = onnx.load(str(onnx_path))
    tensors, sources, config, outputs = _bert_from_graph(proto)
    vocab_lines = len((tokenizer_dir / "vocab.txt").read_text(encoding="utf-8").splitlines())
    fast_vocab = len(json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"])
    if not vocab_lines == fast_vocab == config["vocab_size"]:
        raise ConversionError(
            f"The tokenizer in {tokenizer_dir} has {vocab_lines} (vocab.txt) / {fast_vocab} (tokenizer.json) entries "
            f"but the ONNX word embeddings have {config['vocab_size']} rows",
            "The tokenizer does not fit this model: use one with the same vocabulary.",
        )

    import torch
    from safetensors.torch import save_file
    from transformers import BertConfig

    hidden, pooler = config["hidden_size"], "from the ONNX export"
    if "pooler.dense.weight" not in tensors:  # a sentence-transformers export stops at the last LayerNorm
        tensors["pooler.dense.weight"] = np.zeros((hidden, hidden), dtype=np.float32)
        tensors["pooler.dense.bias"] = np.zeros((hidden,), dtype=np.float32)
        pooler = "absent from the ONNX export; written as zeros, so pooler_output == 0"
    bert_config = BertConfig(architectures=["BertModel"], **config)
    expected = _bert_state_dict_shapes(bert_config)
    if set(expected) != set(tensors):
        missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
        raise ConversionError(f"The ONNX weights do not fill a BertModel: missing {missing}, unexpected {extra}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise ConversionError(
                f"The ONNX weight for {name} has shape {tensors[name].shape}, BertModel needs {shape}"
            )
    bert_config.save_pretrained(out_dir)
    state = {k: torch.from_numpy(np.array(v, dtype=np.float32, order="C", copy=True)) for k, v in tensors.items()}
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})

    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, out_dir / name)
    tok_config_path = out_dir / "tokenizer_config.json"
    tok_config = json.loads(tok_config_path.read_text(encoding="utf-8"))
    tok_config["model_max_length"] = min(
        int(tok_config.get("model_max_length", 512)), config["max_position_embeddings"]
    )
    tok_config_path.write_text(json.dumps(tok_config, indent=2) + "\n", encoding="utf-8")

    last_hidden = next(name for name, what in outputs.items() if what == "last_hidden_state")
    return {
        "converter_version": CONVERTER_VERSION,
        "onnx_file": onnx_path.name,
        "onnx_outputs": outputs,
        "weight_map": dict(sorted(sources.items())),
        "pooler": pooler,
        "self_check": _self_check(proto, out_dir, last_hidden),
    }


def _bert_state_dict_shapes(config: Any) -> dict[str, tuple[int, ...]]:
    """Names and shapes of a BertModel's state dict (non-persistent buffers such as position_ids excluded)."""
    import torch
    from transformers import BertModel

    with torch.device("meta"):
        model = BertModel(config)
    return {name: tuple(value.shape) for name, value in model.state_dict().items()}


def _bert_from_graph(proto: onnx.ModelProto) -> tuple[Tensors, dict[str, str], dict[str, Any], dict[str, str]]:
    """Walk the graph: BertModel tensors, their ONNX sources, the BertConfig values, and what each output is."""
    from onnx import numpy_helper

    graph = proto.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)

    word_suffix = "embeddings.word_embeddings.weight"
    words = [n.input[0] for n in consumers["input_ids"] if n.op_type == "Gather" and n.input[0].endswith(word_suffix)]
    if len(words) != 1 or words[0] not in inits:
        raise ConversionError(
            "The ONNX graph has no single word-embedding Gather on input_ids", "It is not a BERT export."
        )
    prefix = words[0][: -len(word_suffix)]
    tensors: Tensors = {}
    sources: dict[str, str] = {}  # BertModel name -> ONNX initializer name

    def put(key: str, value: np.ndarray, source: str) -> None:
        if key in tensors:
            raise ConversionError(f"Two ONNX initializers map to {key}: {sources[key]} and {source}")
        tensors[key], sources[key] = value, source

    for name, value in inits.items():
        if name.startswith(prefix):  # embeddings, biases, LayerNorms: already in BertModel's layout
            put(name[len(prefix) :], value, name)
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in inits:
            continue
        if node.input[1].startswith(prefix):
            raise ConversionError(f"The MatMul {node.name} multiplies by the named initializer {node.input[1]}")
        users = consumers[node.output[0]]
        biases = [i for u in users if u.op_type == "Add" for i in u.input if i != node.output[0]]
        if len(users) != 1 or len(biases) != 1 or not biases[0].startswith(prefix) or not biases[0].endswith(".bias"):
            raise ConversionError(f"The MatMul weight {node.input[1]} is not followed by exactly one named bias Add")
        module = biases[0][len(prefix) : -len(".bias")]
        if "/" in node.name and f".{module}." not in node.name.replace("/", "."):
            raise ConversionError(f"The MatMul {node.name} adds the bias of {module}")
        put(module + ".weight", inits[node.input[1]].T, node.input[1])  # x @ W: W is nn.Linear's weight transposed
    unused = sorted(set(inits) - set(sources.values()))
    if unused:
        raise ConversionError(f"ONNX initializers the converter did not place: {unused}")
    try:
        config, outputs = _config_and_outputs(graph, tensors, prefix, producers, consumers)
    except (StopIteration, KeyError, IndexError, ValueError) as err:
        raise ConversionError(f"The ONNX graph is not a plain BERT encoder ({type(err).__name__}: {err})") from None
    return tensors, sources, config, outputs


def _config_and_outputs(
    graph: onnx.GraphProto, tensors: Tensors, prefix: str, producers: dict[str, Any], consumers: dict[str, list[Any]]
) -> tuple[dict[str, Any], dict[str, str]]:
    """BertConfig values read from the shapes and the graph, and a description of each graph output."""
    from onnx import helper, numpy_helper

    layers = sorted({int(k.split(".")[2]) for k in tensors if k.startswith("encoder.layer.")})
    if not layers or layers != list(range(len(layers))):
        raise ValueError(f"encoder layers {layers}, not 0..N-1")
    # Heads: the key projection is reshaped to [batch, seq, heads, head_dim] by two Constant ops.
    key_add = next(n for n in consumers[prefix + "encoder.layer.0.attention.self.key.bias"] if n.op_type == "Add")
    reshape = next(n for n in consumers[key_add.output[0]] if n.op_type == "Reshape")
    dims = [
        numpy_helper.to_array(producers[i].attribute[0].t).reshape(-1)[0]
        for i in producers[reshape.input[1]].input[-2:]
    ]
    heads, head_dim = int(dims[0]), int(dims[1])
    norms = [n for n in graph.node if n.op_type == "LayerNormalization"]
    epsilons = {float(helper.get_attribute_value(a)) for n in norms for a in n.attribute if a.name == "epsilon"}
    if len(norms) != 2 * len(layers) + 1 or len(epsilons) != 1:
        raise ValueError(f"expected {2 * len(layers) + 1} LayerNormalization ops sharing one epsilon")
    if not any(n.op_type == "Erf" for n in graph.node):
        raise ValueError("the intermediate activation is not the exact (erf) GELU")
    vocab_size, hidden = tensors["embeddings.word_embeddings.weight"].shape
    if heads * head_dim != hidden:
        raise ValueError(f"{heads} heads x {head_dim} != hidden size {hidden}")
    config = {
        "vocab_size": int(vocab_size),
        "hidden_size": int(hidden),
        "num_hidden_layers": len(layers),
        "num_attention_heads": heads,
        "intermediate_size": int(tensors["encoder.layer.0.intermediate.dense.weight"].shape[0]),
        "max_position_embeddings": int(tensors["embeddings.position_embeddings.weight"].shape[0]),
        "type_vocab_size": int(tensors["embeddings.token_type_embeddings.weight"].shape[0]),
        "layer_norm_eps": float(f"{epsilons.pop():.6g}"),  # float32 9.99999996e-13 -> 1e-12
        "hidden_act": "gelu",
        "pad_token_id": 0,
    }

    last_norm = prefix + f"encoder.layer.{layers[-1]}.output.LayerNorm.weight"
    last_hidden = next(n.output[0] for n in norms if n.input[1] == last_norm)
    inputs = {i.name for i in graph.input}
    outputs: dict[str, str] = {}
    for out in graph.output:
        node = producers.get(out.name)
        if out.name == last_hidden:
            outputs[out.name] = "last_hidden_state"
        elif node is not None and node.op_type == "Identity" and node.input[0] in inputs:
            outputs[out.name] = f"copy of input {node.input[0]}"
        elif _mean_pools(out.name, producers, last_hidden):
            outputs[out.name] = "sentence embedding (masked mean of last_hidden_state)"
        else:
            outputs[out.name] = "unknown"
    if "last_hidden_state" not in outputs.values():
        raise ValueError("the last encoder LayerNorm is not a graph output")
    return config, outputs


def _mean_pools(name: str, producers: dict[str, Any], last_hidden: str) -> bool:
    """Whether ``name`` is computed from ``last_hidden`` through a ReduceSum and a Div (mean pooling)."""
    seen: set[str] = set()
    ops: set[str] = set()
    todo = [name]
    while todo:
        tensor = todo.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        if tensor not in producers:  # a graph input or an initializer
            continue
        ops.add(producers[tensor].op_type)
        todo.extend(producers[tensor].input)
    return last_hidden in seen and {"ReduceSum", "Div"} <= ops


def _self_check(proto: onnx.ModelProto, folder: Path, last_hidden: str) -> dict[str, Any]:
    """Compare the saved folder (eager) with the graph run by onnx's reference evaluator on padded sentences; a
    :class:`ConversionError` beyond :data:`SELF_CHECK_TOLERANCE`."""
    import torch
    from onnx.reference import ReferenceEvaluator
    from transformers import AutoModel, AutoTokenizer

    batch = AutoTokenizer.from_pretrained(folder)(list(SELF_CHECK_TEXTS), padding=True, return_tensors="np")
    feeds = {k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
    expected = ReferenceEvaluator(proto).run([last_hidden], feeds)[0]
    model = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        got = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).last_hidden_state.numpy()
    diff = np.abs(got - expected).max(axis=-1)
    real = feeds["attention_mask"].astype(bool)
    worst, pad = float(diff[real].max()), float(diff[~real].max()) if (~real).any() else None
    if not worst <= SELF_CHECK_TOLERANCE:
        raise ConversionError(f"The converted model differs from the ONNX graph by {worst:.3g} (max abs)")
    return {
        "reference": "onnx.reference.ReferenceEvaluator",
        "attn_implementation": "eager",
        "shape": list(expected.shape),
        "max_abs_diff_real_tokens": worst,
        "max_abs_diff_pad_positions": pad,
    }
