/* The TCP key-value store of the env:// rendezvous (torch's TCPStore
 * convention: MASTER_ADDR, MASTER_PORT): rank 0 serves it on a thread of
 * its own; every rank, rank 0 included, is a client over one TCP
 * connection. Ranks meet through it without a shared file system: they
 * announce themselves, rank 0 checks that they agree (world size,
 * transport, configuration digest) and hands out what the transport needs
 * (the NCCL unique id; Gloo's per-pair addresses).
 *
 * Wire format (both directions), all integers little-endian:
 *   request:  u8 op, u8 key_len (1..255), key bytes, u32 value_len, value bytes
 *             op 1 SET (value stored, replacing), 2 GET (waits until the key
 *             exists; value_len must be 0), 3 ADD (value is an i64 delta;
 *             the key holds an i64 counter, created at 0), 4 PING (key "-")
 *   response: u8 status (0 ok, else an rlp_status' negation), u32 len, bytes
 *             (SET: nothing; GET: the value; ADD: the new i64; PING: nothing)
 * A GET of a missing key is answered when some SET creates it. Values are
 * at most RLPI_STORE_MAX_VALUE bytes and the store holds at most
 * RLPI_STORE_MAX_KEYS keys; a request beyond either, an unknown op or a
 * malformed frame closes that connection (the server keeps serving the
 * others). Nothing is authenticated: the store is for a cluster's private
 * network, as torch's is. */
#ifndef RLPI_DIST_STORE_H
#define RLPI_DIST_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RLPI_STORE_MAX_KEY 255
#define RLPI_STORE_MAX_VALUE ((size_t)1 << 20)
#define RLPI_STORE_MAX_KEYS 65536

typedef struct rlpi_store rlpi_store;

/* Opens the store at host:port (host: a name or a numeric IPv4/IPv6
 * address). With `serve`, first starts the server: listens on every
 * address of this machine at `port` (SO_REUSEADDR; port 0 picks a free one,
 * see rlpi_store_port), so a busy port is RLP_E_IO naming it. Then
 * connects as a client, retrying refused connections until timeout_s has
 * passed (the server may start later than its clients): RLP_E_TIMEOUT
 * naming host:port. RLP_E_INVALID_ARG for a bad host or port; RLP_E_NOMEM. */
int rlpi_store_open(const char *host, int port, bool serve, double timeout_s, rlpi_store **out);

/* The port the server listens on (useful with port 0); 0 for a client. */
int rlpi_store_port(const rlpi_store *s);

/* The numeric local address (IPv4 dotted or IPv6 text) of this client's
 * connection to the store: the address of this host that its peers
 * reach. Owned by the store. */
const char *rlpi_store_local_address(const rlpi_store *s);

/* Every operation below is thread-safe (one request at a time per handle)
 * and fails with RLP_E_CLOSED once the server has gone (or after an
 * earlier I/O error on the connection), RLP_E_TIMEOUT after timeout_s
 * (the open's timeout for set and add) without an answer,
 * RLP_E_INVALID_ARG for an empty or too long key or a too large value. */
int rlpi_store_set(rlpi_store *s, const char *key, const void *value, size_t len);
/* Waits until `key` exists; *value is malloc'd (NUL-terminated one past
 * *len for convenience), freed by the caller. */
int rlpi_store_get(rlpi_store *s, const char *key, void **value, size_t *len, double timeout_s);
/* Adds delta to the counter `key` (0 when new); *result = the new value. */
int rlpi_store_add(rlpi_store *s, const char *key, int64_t delta, int64_t *result);

/* Closes the client connection and, on the serving rank, stops the server
 * (clients still connected then fail with RLP_E_CLOSED). NULL is a no-op. */
void rlpi_store_close(rlpi_store *s);

/* ---- the server's request parser, exposed for the fuzzer ----
 * Parses one request from buf[0..len): RLP_OK with *used bytes consumed
 * and the fields filled (pointers into buf); RLP_E_AGAIN when more bytes
 * are needed; RLP_E_FORMAT for a malformed or oversized request. */
typedef struct rlpi_store_request {
    int op;
    const char *key;        /* not NUL-terminated */
    size_t key_len;
    const unsigned char *value;
    size_t value_len;
} rlpi_store_request;
int rlpi_store_parse_request(const unsigned char *buf, size_t len, rlpi_store_request *req, size_t *used);

#endif
