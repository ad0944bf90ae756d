/* rlpi_env_call_wait: sleeps on the environment's completion counter, so
 * many threads can each wait for their own call without spinning; wakes
 * at the call's deadline and every STOP_POLL_S to look at the stop flag. */
#include "env/env_call_wait.h"

#include "core/clock.h"

#include <math.h>

/* How late a stop request (an abort) is noticed while a call runs. */
#define STOP_POLL_S 0.05

int rlpi_env_call_wait(rlpi_env_call *c, rlp_env *env, const int *stop)
{
    for (;;) {
        uint64_t seen = rlpi_env_completions(env); /* before the poll: a completion in between wakes us */
        double now = rlpi_now_s();
        int st = rlpi_env_call_poll(c, now);
        if (st != RLPI_CALL_RUNNING)
            return st;
        if (stop && __atomic_load_n(stop, __ATOMIC_SEQ_CST))
            return RLPI_CALL_RUNNING;
        double until = now + STOP_POLL_S, deadline = rlpi_env_call_deadline(c);
        if (isfinite(deadline) && deadline < until)
            until = deadline;
        rlpi_env_wait(env, seen, until);
    }
}
