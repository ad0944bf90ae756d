"""Policies (rlp_policy): load, save, logprobs, supervised and RL train
steps, and the enums of the optimizer and the RL algorithms."""
import ctypes
import enum
from ctypes import byref, c_float, c_size_t, c_uint64, c_void_p

from . import _ffi
from ._handle import Handle, callback_scope, check
from ._util import HAVE_NUMPY, CArray, empty, finish, from_c, optional_str, options, struct_record, to_path
from .errors import CallbackError, STATUS_CALLBACK
from .tokenizer import Tokenizer

F = _ffi.F

if HAVE_NUMPY:
    import numpy as _np


class DType(enum.IntEnum):
    """rlp_dtype: storage dtype of saved weights"""
    F32 = 0
    F16 = 1
    BF16 = 2


class GGUFType(enum.IntEnum):
    """rlp_gguf_type: tensor type of GGUF output (ggml type ids)"""
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q8_0 = 8
    Q4_K = 12
    BF16 = 30


def gguf_type(t):
    """A GGUFType from a GGUFType or a name ("q8_0", "F16", ...); another
    int passes through (the library refuses it with its message)."""
    if isinstance(t, str):
        out = ctypes.c_int32()
        check(F.rlp_gguf_type_from_name(byref(out), t.encode()), "rlp_gguf_type_from_name")
        return GGUFType(out.value)
    return GGUFType(t) if int(t) in GGUFType._value2member_map_ else int(t)


class LRSchedule(enum.IntEnum):
    """rlp_lr_schedule"""
    CONSTANT = 0
    LINEAR_WARMUP = 1
    COSINE = 2


class Advantage(enum.IntEnum):
    """rlp_advantage"""
    GRPO = 0
    DR_GRPO = 1
    RLOO = 2
    REINFORCE_PP = 3
    REINFORCE = 4
    GAE = 5  # PPO with a critic: the Trainer runs one (critic_path)


class PolicyLoss(enum.IntEnum):
    """rlp_policy_loss"""
    PPO_CLIP = 0
    DECOUPLED_PPO = 1
    GSPO = 2
    CISPO = 3
    GMPO = 4
    GPG = 5
    SAPO = 6
    CLIP_COV = 7
    KL_COV = 8


class ISLevel(enum.IntEnum):
    """rlp_is_level (rollout correction: rollout_is, rollout_rs)"""
    OFF = 0
    TOKEN = 1
    SEQUENCE = 2
    GEOMETRIC = 3


class Whiten(enum.IntEnum):
    """rlp_whiten (whole-batch advantage normalisation)"""
    POPULATION = 0
    UNBIASED = 1


class KLEstimator(enum.IntEnum):
    """rlp_kl_estimator (0 = no KL)"""
    NONE = 0
    K1 = 1
    K2 = 2
    K3 = 3
    ABS = 4


class LossAgg(enum.IntEnum):
    """rlp_loss_agg"""
    TOKEN_MEAN = 0
    SEQ_MEAN_TOKEN_SUM = 1
    SEQ_MEAN_TOKEN_MEAN = 2
    SEQ_MEAN_TOKEN_SUM_NORM = 3


def rl_options(values, what="rl"):
    """An rlp_rl_options from keywords (its fields: advantage, policy_loss,
    clip_low, clip_high, kl_estimator, kl_coef, loss_agg, ppo_epochs, ...);
    the enum fields take the enums above, their values or their names
    ("sapo", "token"; any case)."""
    values = dict(values or {})
    enums = {"advantage": Advantage, "policy_loss": PolicyLoss, "kl_estimator": KLEstimator, "loss_agg": LossAgg,
             "whiten": Whiten, "rollout_is": ISLevel, "rollout_rs": ISLevel}
    for k, cls in enums.items():
        if k in values:
            v = values[k]
            if isinstance(v, str):  # the enum's member name, any case ("token", "SAPO")
                try:
                    v = cls[v.upper()]
                except KeyError:
                    raise ValueError("%s: %s must be one of %s, not %r"
                                     % (what, k, ", ".join(m.name.lower() for m in cls), v)) from None
            values[k] = int(v)
    opts = options(_ffi.RLOptions, "rlp_rl_options_init", values, [], what=what)
    # ranges and contradictions (rollout_is with tis_cap, ...) refused here, naming the field
    check(F.rlp_rl_options_check(byref(opts)), what)
    return opts


def model_inspect(path):
    """Describes a model file or folder without loading the weights
    (rlp_model_inspect()): architecture, sizes, dtypes..."""
    info = _ffi.ModelInfo()
    info.version = info._version_
    check(F.rlp_model_inspect(byref(info), to_path(path)), "rlp_model_inspect")
    return struct_record(info)


def _sequences(seqs):
    """[(tokens, n_prompt)] / [{"tokens": t, "n_prompt": k}] / [tokens] ->
    (rlp_sequence array, count, scored token count, keepalive)."""
    items = []
    for i, s in enumerate(seqs):
        if isinstance(s, dict):
            toks, n_prompt = s["tokens"], s.get("n_prompt", 0)
        elif isinstance(s, tuple) and len(s) == 2 and not isinstance(s[0], int):
            toks, n_prompt = s
        else:
            toks, n_prompt = s, 0
        a = CArray(toks, ctypes.c_int32, "sequences[%d]" % i)
        items.append((a, int(n_prompt)))
    arr = (_ffi.Sequence * max(len(items), 1))()
    scored = 0
    for i, (a, n_prompt) in enumerate(items):
        if n_prompt < 0:
            raise ValueError("sequences[%d]: n_prompt must be >= 0" % i)
        arr[i].tokens = a.ptr
        arr[i].n_tokens = a.n
        arr[i].n_prompt = n_prompt
        scored += max(a.n - max(n_prompt, 1), 0)
    return arr, len(items), scored, items


class LossContext:
    """What a Python loss sees for one micro-batch (rlp_loss_context).

    Read: n_seqs, seq_index, token_start, n_tokens, logprobs, entropy,
    step_n_seqs, step_n_tokens. Write: dlogprobs[t] and dentropy[t]
    (∂L/∂logprobs, ∂L/∂entropy, zeroed on entry) and loss (this
    micro-batch's contribution; or return it from the loss function).
    With numpy the arrays are views of the library's memory: use them
    during the call only.
    """

    def __init__(self, c_ptr):
        self._c = c_ptr
        c = c_ptr.contents
        n, s = c.n_tokens, c.n_seqs
        self.n_seqs = s
        self.n_tokens = n
        self.step_n_seqs = c.step_n_seqs
        self.step_n_tokens = c.step_n_tokens
        self.seq_index = from_c(c.seq_index, s, c_size_t)
        self.token_start = from_c(c.token_start, s + 1, c_size_t)
        self.logprobs = _view(c.logprobs, n, writable=False)
        self.entropy = _view(c.entropy, n, writable=False)
        self.dlogprobs = _view(c.dlogprobs, n, writable=True)
        self.dentropy = _view(c.dentropy, n, writable=True)
        self.loss = 0.0

    def nll(self):
        """The built-in token-mean NLL (rlp_loss_nll) on this micro-batch:
        overwrites dlogprobs with its gradient, sets and returns loss. Add
        your own terms to both afterwards."""
        check(F.rlp_loss_nll(self._c, None), "rlp_loss_nll")
        self.loss = self._c.contents.loss
        return self.loss


def _view(ptr, n, writable):
    if not ptr or n == 0:
        return _np.zeros(0, dtype=_np.float32) if HAVE_NUMPY else []
    if HAVE_NUMPY:
        v = _np.ctypeslib.as_array(ptr, shape=(n,))
        if not writable:
            v.flags.writeable = False
        return v
    arr = (c_float * n).from_address(ctypes.addressof(ptr.contents))
    return arr if writable else list(arr)


class Policy(Handle):
    """A causal LM with trainable weights and optimizer state.

    Policy(context, path, head_chunk_tokens=0, activation_checkpointing=False,
           trainable=True) loads a GGUF file, a Hugging Face folder or a
    llama2.c checkpoint. Keeps its context alive.
    """

    _free = "rlp_policy_free"

    def __init__(self, context, path, head_chunk_tokens=0, activation_checkpointing=False, trainable=True):
        opts = options(_ffi.PolicyOptions, "rlp_policy_options_init",
                       {"head_chunk_tokens": head_chunk_tokens,
                        "activation_checkpointing": activation_checkpointing, "trainable": trainable}, [],
                       what="Policy")
        out = c_void_p()
        with context._use() as c:
            check(F.rlp_policy_load(byref(out), c, to_path(path), byref(opts)), "rlp_policy_load")
            Handle.__init__(self, out.value, parents=(context,))
        self.context = context
        self._tokenizer = None

    def save(self, dir, dtype=DType.F32):
        """Writes a Hugging Face folder (config.json, model.safetensors,
        tokenizer files) atomically."""
        with self._use() as p:
            check(F.rlp_policy_save(p, to_path(dir), int(dtype)), "rlp_policy_save")

    def save_gguf(self, path, type="f16", embed_type=None, name=None, tokenizer_gguf=None):
        """Writes one GGUF file that llama.cpp / Ollama load (atomically):
        weight matrices in `type` (GGUFType or "f32", "f16", "bf16", "q8_0",
        "q4_0", "q4_k"), token embedding and head in `embed_type` (default: `type`),
        norms and biases in F32, `name` as general.name, the tokenizer's
        GGUF metadata copied from `tokenizer_gguf` or else from the GGUF the
        policy's tokenizer came from."""
        keep = []
        opts = options(_ffi.GGUFSaveOptions, "rlp_gguf_save_options_init",
                       {"type": int(gguf_type(type)),
                        "embed_type": -1 if embed_type is None else int(gguf_type(embed_type))}, keep)
        if name is not None:
            keep.append(name.encode() if isinstance(name, str) else bytes(name))
            opts.name = keep[-1]
        if tokenizer_gguf is not None:
            keep.append(to_path(tokenizer_gguf))
            opts.tokenizer_gguf = keep[-1]
        with self._use() as p:
            check(F.rlp_policy_save_gguf(p, to_path(path), byref(opts)), "rlp_policy_save_gguf")

    def save_optimizer(self, path):
        """AdamW moments, step counts and the version, for resume."""
        with self._use() as p:
            check(F.rlp_policy_save_optimizer(p, to_path(path)), "rlp_policy_save_optimizer")

    def load_optimizer(self, path):
        with self._use() as p:
            check(F.rlp_policy_load_optimizer(p, to_path(path)), "rlp_policy_load_optimizer")

    def clone(self, trainable=False, context=None):
        """A copy of the current weights as a new policy (frozen by default:
        a reference policy or a snapshot), on the same context or on
        `context` (its own threads or device, e.g. for a rollout engine)."""
        from .context import Context
        if context is not None and not isinstance(context, Context):
            raise TypeError("context must be an rlpost.Context, not %s" % type(context).__name__)
        ctx = self.context if context is None else context
        out = c_void_p()
        with self._use() as p:
            if context is None:
                check(F.rlp_policy_clone(byref(out), p, 1 if trainable else 0), "rlp_policy_clone")
            else:
                with context._use() as c:
                    check(F.rlp_policy_clone_to(byref(out), p, c, 1 if trainable else 0), "rlp_policy_clone_to")
        pol = Policy.__new__(Policy)
        Handle.__init__(pol, out.value, parents=(ctx,))
        pol.context = ctx
        pol._tokenizer = None
        return pol

    @property
    def tokenizer(self):
        """The model's own tokenizer (borrowed; closed with the policy), or
        None when the model file has none (llama2.c checkpoints)."""
        with self._use() as p:
            if self._tokenizer is None or self._tokenizer.closed:
                ptr = F.rlp_policy_tokenizer(p)
                if not ptr:
                    return None
                self._tokenizer = Tokenizer._borrowed(ptr, self)
            return self._tokenizer

    def set_comm(self, comm):
        """Data parallelism: train steps become collectives of @p comm (a
        Comm), each rank passing its share of the batch; None trains alone
        again. The policy keeps the group alive while attached."""
        with self._use() as p:
            if comm is None:
                check(F.rlp_policy_set_comm(p, None), "rlp_policy_set_comm")
                self._comm = None
                return
            with comm._use() as c:
                check(F.rlp_policy_set_comm(p, c), "rlp_policy_set_comm")
            self._comm = comm
            comm._attached.add(self)

    def broadcast(self, comm, root=0):
        """Collective: copies rank @p root's weights and version into this
        policy on every other rank of @p comm."""
        with self._use() as p, comm._use() as c:
            check(F.rlp_policy_broadcast(p, c, int(root)), "rlp_policy_broadcast")

    @property
    def version(self):
        """Optimizer steps applied (the policy version of the RL loop)."""
        v = c_uint64()
        with self._use() as p:
            check(F.rlp_policy_version(byref(v), p), "rlp_policy_version")
        return v.value

    @property
    def n_params(self):
        v = c_uint64()
        with self._use() as p:
            check(F.rlp_policy_n_params(byref(v), p), "rlp_policy_n_params")
        return v.value

    def enable_lora(self, rank=16, alpha=32.0, rslora=False, targets=None, seed=0, base_dtype=None):
        """Attaches LoRA adapters (PEFT's LoraLayer, dropout 0) and freezes
        the base: training updates the adapters only. `targets`: a list or
        comma-separated string of q_proj, k_proj, v_proj, o_proj, gate_proj,
        up_proj, down_proj, or "all" (None = all). `base_dtype`: "q8_0",
        "q4_0" or "q4_k" keeps the frozen base's projections in GGUF blocks,
        dequantized a layer at a time (QLoRA-style); None or "f32" keeps
        fp32."""
        if isinstance(targets, (list, tuple)):
            targets = ",".join(targets)
        keep = []
        values = {"rank": rank, "alpha": alpha, "rslora": rslora, "seed": seed}
        if targets is not None:
            values["targets"] = targets
        if base_dtype is not None:
            values["base_dtype"] = base_dtype
        opts = options(_ffi.LoraOptions, "rlp_lora_options_init", values, keep,
                       {"targets": optional_str("targets"), "base_dtype": optional_str("base_dtype")},
                       what="Policy.enable_lora")
        with self._use() as p:
            check(F.rlp_policy_enable_lora(p, byref(opts)), "rlp_policy_enable_lora")

    @property
    def n_trainable(self):
        """Parameters the optimizer updates (the adapters' under LoRA)."""
        v = c_uint64()
        with self._use() as p:
            check(F.rlp_policy_n_trainable(byref(v), p), "rlp_policy_n_trainable")
        return v.value

    def save_lora(self, dir, base_model=None):
        """Writes the adapters as PEFT's save_pretrained does
        (adapter_model.safetensors, adapter_config.json)."""
        with self._use() as p:
            check(F.rlp_policy_save_lora(p, to_path(dir), None if base_model is None else base_model.encode()),
                  "rlp_policy_save_lora")

    def load_lora(self, dir):
        """Loads a PEFT LoRA folder (attaching adapters of its config when
        none are attached)."""
        with self._use() as p:
            check(F.rlp_policy_load_lora(p, to_path(dir)), "rlp_policy_load_lora")

    def memory(self):
        """Bytes held: weights, gradients, optimizer, activations."""
        m = _ffi.MemoryStats()
        m.version = m._version_
        with self._use() as p:
            check(F.rlp_policy_memory(byref(m), p), "rlp_policy_memory")
        return struct_record(m)

    def set_optimizer(self, **kw):
        """AdamW settings: lr, beta1, beta2, eps, weight_decay, max_grad_norm,
        schedule (LRSchedule), warmup_steps, total_steps, min_lr_ratio."""
        if "schedule" in kw:
            kw["schedule"] = int(kw["schedule"])
        opts = options(_ffi.OptimizerOptions, "rlp_optimizer_options_init", kw, [],
                       what="set_optimizer")
        with self._use() as p:
            check(F.rlp_policy_set_optimizer(p, byref(opts)), "rlp_policy_set_optimizer")

    def logprobs(self, sequences, temperature=1.0, entropy=False):
        """Per-token logprobs of the scored tokens of the sequences, in
        order: sequence (tokens, n_prompt) scores tokens[t] for t >=
        max(n_prompt, 1). With entropy=True returns (logprobs, entropy)."""
        arr, n, scored, keep = _sequences(sequences)
        lp, lp_ptr = empty(scored, c_float)
        ent, ent_ptr = empty(scored, c_float) if entropy else (None, None)
        got = c_size_t()
        with self._use() as p:
            check(F.rlp_policy_logprobs(p, arr, n, float(temperature), lp_ptr, ent_ptr, max(scored, 1),
                                        byref(got)), "rlp_policy_logprobs")
        if entropy:
            return finish(lp, got.value), finish(ent, got.value)
        return finish(lp, got.value)

    @property
    def info(self):
        """What this policy runs (rlp_policy_info()): the record
        model_inspect() gives for a file, with format "" and dtypes
        "F32:N" (a loaded policy holds fp32 tensors)."""
        info = _ffi.ModelInfo()
        info.version = info._version_
        with self._use() as p:
            check(F.rlp_policy_info(byref(info), p), "rlp_policy_info")
        return struct_record(info)

    @property
    def score_labels(self):
        """Outputs of the score head: 0 for a language model, >= 1 for a
        value or reward model (an HF *ForSequenceClassification or
        *ForTokenClassification folder; rlp_policy_score_labels())."""
        n = ctypes.c_uint32()
        with self._use() as p:
            check(F.rlp_policy_score_labels(byref(n), p), "rlp_policy_score_labels")
        return n.value

    def score(self, sequences):
        """The score head of a value or reward model at every token of each
        sequence (rlp_policy_score()): a list with one entry per sequence,
        each a list of n_tokens rows of score_labels floats (a numpy array
        (n_tokens, labels) when numpy is installed). An ORM's score is the
        last row; n_prompt is ignored."""
        if len(sequences) == 0:
            return []
        arr, n, _, keep = _sequences(sequences)
        labels = self.score_labels
        total = sum(a.n for a, _ in keep) * max(labels, 1)
        out, out_ptr = empty(total, c_float)
        got = c_size_t()
        with self._use() as p:
            check(F.rlp_policy_score(p, arr, n, out_ptr, max(total, 1), byref(got)), "rlp_policy_score")
        flat = finish(out, got.value)
        res, at = [], 0
        for a, _ in keep:
            part = flat[at: at + a.n * labels]
            if HAVE_NUMPY:
                res.append(_np.asarray(part, dtype=_np.float32).reshape(a.n, labels))
            else:
                res.append([list(part[t * labels: (t + 1) * labels]) for t in range(a.n)])
            at += a.n * labels
        return res

    def train_step(self, sequences, loss=None, temperature=1.0, micro_batch_tokens=0):
        """One optimizer step on the sequences with a loss over their
        logprobs: None for the built-in token-mean NLL, or a Python callable
        loss(ctx: LossContext) -> float (or set ctx.loss), which fills
        ctx.dlogprobs. An exception in it aborts the step with the weights
        untouched (CallbackError from that exception). Returns the stats."""
        arr, n, _, keep = _sequences(sequences)
        topts = options(_ffi.TrainOptions, "rlp_train_options_init",
                        {"temperature": temperature, "micro_batch_tokens": micro_batch_tokens}, [],
                        what="train_step")
        stats = _ffi.TrainStats()
        stats.version = stats._version_
        failure = []
        if loss is None or loss == "nll":
            fn = _ffi.LOSS_NLL
        elif callable(loss):
            owner = self

            def trampoline(ctx_ptr, payload):
                try:
                    with callback_scope(owner):
                        lc = LossContext(ctx_ptr)
                        r = loss(lc)
                        ctx_ptr.contents.loss = float(lc.loss if r is None else r)
                    return 0
                except BaseException as e:
                    failure.append(e)
                    return 1
            fn = _ffi.LossFn(trampoline)
        else:
            raise TypeError("loss must be None, 'nll' or a callable, not %r" % (loss,))
        with self._use() as p:
            rc = F.rlp_policy_train_step(p, arr, n, fn, None, byref(topts), byref(stats))
        if rc == STATUS_CALLBACK and failure:
            err = CallbackError("rlp_policy_train_step: the loss raised %s: %s"
                                % (type(failure[0]).__name__, failure[0]), STATUS_CALLBACK,
                                "rlp_policy_train_step")
            raise err from failure[0]
        check(rc, "rlp_policy_train_step")
        return struct_record(stats)

    def train_rl(self, batch, ref=None, **kw):
        """One RL step on a scored Batch (rlp_policy_train_rl()): advantages
        per group, the chosen loss, ppo_epochs × mini_batches optimizer
        steps. Keywords are the fields of rlp_rl_options (advantage,
        policy_loss, clip_low, clip_high, kl_estimator, kl_coef, loss_agg,
        ...); ref is a frozen Policy for the KL. Returns the stats."""
        opts = rl_options(kw, what="train_rl")
        stats = _ffi.RLStats()
        stats.version = stats._version_
        with self._use() as p, batch._use() as b:
            if ref is not None:
                with ref._use() as r:
                    rc = F.rlp_policy_train_rl(p, b, r, byref(opts), byref(stats))
            else:
                rc = F.rlp_policy_train_rl(p, b, None, byref(opts), byref(stats))
        check(rc, "rlp_policy_train_rl")
        return struct_record(stats)

