/* `rlpost train`'s check of rollout.urls before anything is written: each
 * an http(s) base URL, no repeats, and (plain http) answering GET /health
 * within a deadline, so that a typo or a worker not started yet is named
 * at once instead of failing the first step. */
#define _GNU_SOURCE 1
#include "train.h"
#include "train_config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_URLS = 64, PROBE_MS = 5000 };

/* ------------------------------------------------------------------------ */
/* rollout.urls                                                             */
/* ------------------------------------------------------------------------ */

/* Splits an http(s) base URL into host, port and path; -1 when malformed. */
int train_parse_url(const char *url, int *https, char *host, size_t hcap, char *port, size_t pcap, char *path,
                     size_t cap)
{
    const char *p;
    if (!strncmp(url, "http://", 7)) {
        *https = 0;
        p = url + 7;
    } else if (!strncmp(url, "https://", 8)) {
        *https = 1;
        p = url + 8;
    } else {
        return -1;
    }
    for (const char *q = url; *q; q++)
        if ((unsigned char)*q <= ' ' || *q == 0x7f)
            return -1;
    const char *end = p + strcspn(p, "/?#");
    if (*end == '?' || *end == '#')
        return -1;
    const char *colon;
    if (*p == '[') { /* [v6]:port */
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (!rb || rb == p + 1)
            return -1;
        fmt(host, hcap, "%.*s", (int)(rb - p - 1), p + 1);
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
        if (rb + 1 < end && !colon)
            return -1;
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        size_t hl = (size_t)((colon ? colon : end) - p);
        if (hl == 0)
            return -1;
        fmt(host, hcap, "%.*s", (int)hl, p);
    }
    if (colon) {
        size_t pl = (size_t)(end - colon - 1);
        if (pl == 0 || pl > 5 || strspn(colon + 1, "0123456789") < pl)
            return -1;
        fmt(port, pcap, "%.*s", (int)pl, colon + 1);
        if (atoi(port) < 1 || atoi(port) > 65535)
            return -1;
    } else {
        fmt(port, pcap, "%s", *https ? "443" : "80");
    }
    fmt(path, cap, "%s", end);
    size_t l = strlen(path);
    while (l > 0 && path[l - 1] == '/')
        path[--l] = 0;
    return 0;
}

int train_probe_health(const char *host, const char *port, const char *path, char *why, size_t cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai) {
        fmt(why, cap, "cannot resolve '%s': %s", host, gai_strerror(gai));
        return -1;
    }
    int ok = -1;
    fmt(why, cap, "no address");
    for (struct addrinfo *a = ai; a && ok; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            fmt(why, cap, "socket: %s", strerror(errno));
            continue;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t el = sizeof err;
        if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS) {
            fmt(why, cap, "%s", strerror(errno));
        } else if (poll(&pf, 1, PROBE_MS) != 1) {
            fmt(why, cap, "no connection within %d s", PROBE_MS / 1000);
        } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
            fmt(why, cap, "%s", strerror(err ? err : errno));
        } else {
            char req[1024], resp[64] = {0};
            int len = fmt(req, sizeof req, "GET %s/health HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n", path,
                          host);
            size_t got = 0;
            if (len > 0 && len < (int)sizeof req && send(fd, req, (size_t)len, MSG_NOSIGNAL) == len) {
                pf.events = POLLIN;
                while (got < sizeof resp - 1 && poll(&pf, 1, PROBE_MS) == 1) {
                    ssize_t k = recv(fd, resp + got, sizeof resp - 1 - got, 0);
                    if (k <= 0)
                        break;
                    got += (size_t)k;
                }
            }
            resp[got] = 0;
            resp[strcspn(resp, "\r\n")] = 0;
            if (!strncmp(resp, "HTTP/1.", 7) && !strncmp(resp + 8, " 200", 4))
                ok = 0;
            else
                fmt(why, cap, "%s", got ? resp : "no answer");
        }
        close(fd);
    }
    freeaddrinfo(ai);
    return ok;
}

int train_check_urls(run *r)
{
    json_t *urls = cfg_get(r->cfg, "rollout.urls");
    size_t n = json_array_size(urls);
    if (n > MAX_URLS) {
        fmt(r->err, ERR_CAP, "rollout.urls: %zu URLs, at most %d", n, MAX_URLS);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(urls, i);
        if (!json_is_string(v)) {
            fmt(r->err, ERR_CAP, "rollout.urls[%zu]: must be a string (an http:// or https:// base URL)", i);
            return -1;
        }
        const char *u = json_string_value(v);
        char host[256], port[8], path[512];
        int https;
        if (train_parse_url(u, &https, host, sizeof host, port, sizeof port, path, sizeof path)) {
            fmt(r->err, ERR_CAP, "rollout.urls[%zu]: \"%s\" is not an http:// or https:// base URL "
                "(e.g. \"http://127.0.0.1:8000\")", i, u);
            return -1;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(u, json_string_value(json_array_get(urls, j)))) {
                fmt(r->err, ERR_CAP, "rollout.urls[%zu]: repeats rollout.urls[%zu] (\"%s\")", i, j, u);
                return -1;
            }
    }
    /* then whether they answer (https is left to the remote client) */
    for (size_t i = 0; i < n; i++) {
        const char *u = json_string_value(json_array_get(urls, i));
        char host[256], port[8], path[512], why[256];
        int https;
        train_parse_url(u, &https, host, sizeof host, port, sizeof port, path, sizeof path);
        if (!https && train_probe_health(host, port, path, why, sizeof why)) {
            fmt(r->err, ERR_CAP, "rollout.urls[%zu]: %s does not answer GET /health (%s); start the workers "
                "first (docs/swarm.md)", i, u, why);
            return -1;
        }
    }
    return 0;
}

