/* Configuration of `rlpost train` and `rlpost eval`: one JSON object whose
 * keys and types are fixed by a table of defaults (docs/configuration.md).
 * Loading merges the file and the --set overrides into the defaults,
 * refusing unknown keys and wrong types with a message naming the key; it
 * never touches the file system beyond reading the config file. */
#ifndef RLPOST_TRAIN_CONFIG_H
#define RLPOST_TRAIN_CONFIG_H

#include <jansson.h>
#include <stddef.h>

/* The defaults as a new JSON object (caller owns it). */
json_t *train_config_defaults(void);

/* Loads @p path (may be NULL: defaults only), applies the n_sets "a.b=value"
 * overrides (value parsed as JSON, else taken as a string) and checks keys
 * and types. Returns the effective config, or NULL with a one-line message
 * in err. */
json_t *train_config_load(const char *path, char *const *sets, size_t n_sets, char *err, size_t cap);

/* Value at a dotted path ("algorithm.kl_coef"); NULL when absent. */
json_t *cfg_get(const json_t *cfg, const char *dotted);
double cfg_num(const json_t *cfg, const char *dotted);
long long cfg_int(const json_t *cfg, const char *dotted);
int cfg_bool(const json_t *cfg, const char *dotted);
/* String at a path, or NULL when null. */
const char *cfg_str(const json_t *cfg, const char *dotted);

#endif
