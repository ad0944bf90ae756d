"""rlpost: Python bindings of librlpost (RL post-training of causal LMs),
pure ctypes.

The library is found through RLPOST_LIBRARY (a path), then next to this
package, then the system loader; a library of another major version is
refused at import. Every handle of the C API is a class here with
close() (safe twice), `with` support and a __del__ fallback; every
negative status is raised as an rlpost.Error subclass carrying
rlp_error_last(). Token ids and logprobs come back as numpy arrays when
numpy is installed, as lists otherwise (HAVE_NUMPY says which).

    import rlpost
    with rlpost.Context(n_threads=2) as ctx:
        policy = rlpost.Policy(ctx, "model.gguf")
        engine = rlpost.RolloutEngine(policy, share_weights=True)
        reward = rlpost.RewardFn(lambda r: float("<answer>" in r.completion))
        batch = engine.generate(["What is 2+2?"], n=4, max_new_tokens=64)
        reward.score(batch)
        print(policy.train_rl(batch))

The run loop itself is rlpost.Trainer (sync, pull and async RL runs over
a policy, a task and a reward); rlpost.RolloutWorker is its producer half.
"""
from . import _ffi
from ._util import HAVE_NUMPY, Record
from .batch import Batch, Episode, EpisodeEnd, FinishReason, Provenance, Trajectory
from .comm import Comm, CommTransport, ReduceOp
from .buffer import STALENESS_UNBOUNDED, WAIT_FOREVER, BufferFullPolicy, ReplayBuffer
from .context import (Backend, Context, LogLevel, MatmulPrecision, abi_version, backend_available,
                      backend_device_count, backend_name, error_clear, error_last, error_last_code, status_str,
                      version_number, version_string)
from .env import Env, EnvEpisode, EnvReply, parse_tool_calls
from .errors import (AgainError, BackendError, CallbackError, ClosedError, Error, FormatError, InternalError,
                     InvalidArgumentError, IOError, NetworkError, NotFoundError, OutOfMemoryError, OverflowError,
                     StateError, TimeoutError, UnsupportedError)
from .policy import Advantage, DType, GGUFType, gguf_type, ISLevel, KLEstimator, LossAgg, LossContext, LRSchedule, Policy, PolicyLoss, Whiten, model_inspect
from .reward import InvalidSample, RefineMode, Reward, RewardFn, RewardRequest, builtin_names, refine
from .rollout import InterruptMode, LogprobsMode, RolloutEngine, RolloutWeights, StreamEvent
from .sync import Synchronizer, SyncMode, SyncTransport
from .task import PromptSet, Task
from .tokenizer import DecodeFlags, Detokenizer, EncodeFlags, Tokenizer, TokenRole
from .trainer import (BatchView, EvalResult, RolloutWorker, StepRecord, TrainMode, Trainer, stats_bootstrap_mean,
                      stats_bootstrap_paired, stats_wilson)

# rlpost.IOError, rlpost.TimeoutError and rlpost.OverflowError subclass the built-ins of
# the same name but are left out of __all__, so `from rlpost import *` never hides a built-in.
_SHADOWING_BUILTINS = (IOError, TimeoutError, OverflowError)

__all__ = [
    # version, errors, backends
    "version_number", "version_string", "abi_version", "status_str", "error_last", "error_last_code",
    "error_clear", "backend_available", "backend_name", "backend_device_count", "HAVE_NUMPY", "Record",
    "Error", "InvalidArgumentError", "OutOfMemoryError", "FormatError", "UnsupportedError", "BackendError",
    "NetworkError", "CallbackError", "ClosedError", "AgainError", "NotFoundError", "StateError", "InternalError",
    # handles
    "Context", "Tokenizer", "Detokenizer", "Policy", "LossContext", "model_inspect", "Batch", "Trajectory",
    "Provenance", "Episode", "RolloutEngine", "StreamEvent", "Task", "PromptSet", "RewardFn", "RewardRequest", "Reward",
    "InvalidSample", "builtin_names", "refine", "ReplayBuffer", "Synchronizer", "Comm", "Trainer", "RolloutWorker",
    "BatchView", "StepRecord", "Env", "EnvReply", "EnvEpisode", "parse_tool_calls", "EvalResult", "stats_wilson", "stats_bootstrap_mean", "stats_bootstrap_paired",
    # enums and constants
    "Backend", "LogLevel", "MatmulPrecision", "TokenRole", "EncodeFlags", "DecodeFlags", "DType", "GGUFType", "gguf_type", "LRSchedule", "Advantage",
    "PolicyLoss", "ISLevel", "Whiten", "KLEstimator", "LossAgg", "FinishReason", "LogprobsMode", "InterruptMode", "RolloutWeights", "RefineMode",
    "BufferFullPolicy", "SyncMode", "SyncTransport", "CommTransport", "ReduceOp", "WAIT_FOREVER",
    "STALENESS_UNBOUNDED", "TrainMode", "EpisodeEnd",
]

#: Version of these bindings (the library's own is version_string()).
__version__ = "0.1.0"
#: The librlpost that was loaded.
library_path = _ffi.library_path
