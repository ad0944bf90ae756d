/* The built-in "tools" environment (rlp_env_create_builtin(…, "tools", …)):
 * search, open and calculator tools behind the ASearcher tag template or
 * the Qwen/Hermes <tool_call> template. Internal to lib/env. */
#ifndef RLPI_ENV_ENV_TOOLS_H
#define RLPI_ENV_ENV_TOOLS_H

#include "rlpost.h"

int rlpi_env_tools_create(rlp_env **out, const char *options_json, const rlp_env_options *opts);

#endif
