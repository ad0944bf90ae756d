/* Fields of a trajectory's metadata JSON that reward functions read: the
 * reference answer, the assistant prefix. The metadata is untrusted text
 * from a dataset: parsed with a depth bound, never assumed well-formed. */
#ifndef RLPI_REWARD_METADATA_H
#define RLPI_REWARD_METADATA_H

/* The top-level field `key` of a metadata JSON object: a string as is, a
 * number as its JSON text (numbers only when numbers_ok). Returns a
 * malloc'd string, or NULL when absent, of another type, or not an object;
 * *bad is set when the metadata is not valid JSON. */
char *rlpi_metadata_field(const char *metadata_json, const char *key, int numbers_ok, int *bad);

/* The "reference" field (string or number). */
char *rlpi_metadata_reference(const char *metadata_json, int *bad);

#endif
