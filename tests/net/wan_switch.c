/*
 * wan_switch: a userspace learning Ethernet switch that emulates WAN links
 * (delay, jitter, loss, a bandwidth cap) for the multi-host tests, where the
 * kernel has no sch_netem. Runs inside the "switch" network namespace of
 * tests/cli/netns_hosts.sh (hosts_make_wan), one port per veth end there.
 *
 *   wan_switch [--delay-ms D] [--jitter-ms J] [--loss PCT] [--rate-mbit R]
 *              [--queue-kb K] [--seed S] [--stats FILE] [--ready FILE] IFACE...
 *   wan_switch --offloads-off IFACE...
 *
 * Each port is an AF_PACKET/SOCK_RAW/ETH_P_ALL socket bound to its interface
 * (promiscuous, PACKET_IGNORE_OUTGOING). Source MACs are learned; unicast to
 * a learned MAC goes to its port, anything else is flooded to all other
 * ports. Every copy of a frame leaving through a port (one crossing of the
 * switch = one direction of a link):
 *   - is dropped with probability PCT % (per frame, seeded PRNG: ARP too);
 *   - otherwise departs at max(arrival + D + U[-J, +J], the port's previous
 *     departure) (no reordering on a port), and with a rate cap the port
 *     serializes at R Mbit/s: departure = max(departure, port busy until) +
 *     frame bytes * 8 / R;
 *   - is tail-dropped when the port already holds K KiB of pending frames
 *     (default 4096).
 * Pending frames wait in a min-heap by departure time; ppoll() sleeps with a
 * nanosecond timeout until the next one (CLOCK_MONOTONIC, 1 us timer slack).
 * The arrival time is the kernel's receive timestamp (SO_TIMESTAMPNS), so a
 * switch that is scheduled late on a busy machine does not add to the delay;
 * it also asks for nice -10 (root), to be woken on time for departures.
 *
 * Offloads: veth does TSO/GSO and checksum offload, so a packet socket would
 * see 64 KiB TCP "frames" (which cannot be sent through a 1500-byte MTU) with
 * checksums not yet filled in (which the receiver would drop). The
 * --offloads-off mode turns off tx checksumming, scatter-gather, TSO, GSO and
 * GRO on the given interfaces through the SIOCETHTOOL ioctl (what `ethtool
 * -K IFACE tx off sg off tso off gso off gro off` does, without needing the
 * ethtool program); hosts_make_wan runs it on every host's eth0 and on the
 * switch's ports, so the kernel segments and checksums in software and every
 * frame the switch sees is a real MTU-sized packet. As a safety net the
 * ports also use PACKET_VNET_HDR and hand the virtio-net header of a frame
 * through unchanged, so a GSO or checksum-partial frame that still arrives
 * (an interface that was not switched off) is forwarded correctly (the
 * kernel segments or checksums it on the way out) instead of being lost; the
 * "offload_frames" counter in the stats says whether that ever happened.
 *
 * SIGTERM/SIGINT: exit 0 after writing --stats FILE (JSON, per port: frames
 * and bytes in and out, drops by loss, by the queue limit, send errors);
 * SIGUSR1 writes the stats file without exiting.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/ethtool.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 64
#define MAC_TABLE 1024
#define RX_BUF (256 * 1024)
#define RX_BATCH 64

/* struct virtio_net_hdr (linux/virtio_net.h), the PACKET_VNET_HDR prefix */
struct vnet_hdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
#define VNET_F_NEEDS_CSUM 1
#define VNET_F_DATA_VALID 2
#define VNET_HLEN ((int)sizeof(struct vnet_hdr))

struct port {
  char name[IF_NAMESIZE];
  int ifindex, fd;
  uint64_t last_depart; /* departure of the latest frame queued (ns) */
  uint64_t queued_bytes;
  uint64_t frames_in, bytes_in, frames_out, bytes_out;
  uint64_t dropped_loss, dropped_queue, tx_errors, offload_frames, rx_errors;
};

struct frame {
  uint64_t depart, seq;
  int port;
  uint32_t len; /* bytes in data: the vnet header, then the Ethernet frame */
  unsigned char data[];
};

struct mac_entry {
  unsigned char mac[6];
  int port; /* -1: unused */
  uint64_t seen;
};

static struct port ports[MAX_PORTS];
static int nports;
static struct mac_entry macs[MAC_TABLE];
static struct frame **heap;
static size_t heap_n, heap_cap;
static uint64_t seq_next;

static double delay_ms, jitter_ms, loss_pct, rate_mbit;
static uint64_t queue_limit = 4096ull * 1024;
static uint64_t seed = 1;
static const char *stats_path;

static volatile sig_atomic_t stop_flag, dump_flag;

static void on_signal(int sig) {
  if (sig == SIGUSR1)
    dump_flag = 1;
  else
    stop_flag = 1;
}

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* xorshift64*, seeded through splitmix64 */
static uint64_t rng_state;
static void rng_seed(uint64_t s) {
  uint64_t z = s + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  rng_state = (z ^ (z >> 31)) | 1;
}
static double rng_uniform(void) { /* [0, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;
}

/* ---- the heap of pending frames, by (departure, arrival order) ---- */

static int frame_before(const struct frame *a, const struct frame *b) {
  return a->depart < b->depart || (a->depart == b->depart && a->seq < b->seq);
}

static int heap_push(struct frame *f) {
  if (heap_n == heap_cap) {
    size_t cap = heap_cap ? heap_cap * 2 : 1024;
    struct frame **h = realloc(heap, cap * sizeof *h);
    if (!h)
      return -1;
    heap = h;
    heap_cap = cap;
  }
  size_t i = heap_n++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!frame_before(f, heap[p]))
      break;
    heap[i] = heap[p];
    i = p;
  }
  heap[i] = f;
  return 0;
}

static struct frame *heap_pop(void) {
  struct frame *top = heap[0], *last = heap[--heap_n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= heap_n)
      break;
    if (c + 1 < heap_n && frame_before(heap[c + 1], heap[c]))
      c++;
    if (!frame_before(heap[c], last))
      break;
    heap[i] = heap[c];
    i = c;
  }
  if (heap_n)
    heap[i] = last;
  return top;
}

/* ---- learning ---- */

static void mac_learn(const unsigned char *mac, int port, uint64_t now) {
  if (mac[0] & 1)
    return; /* a multicast source is not an address */
  int free_slot = -1, oldest = 0;
  for (int i = 0; i < MAC_TABLE; i++) {
    if (macs[i].port < 0) {
      if (free_slot < 0)
        free_slot = i;
      continue;
    }
    if (memcmp(macs[i].mac, mac, 6) == 0) {
      macs[i].port = port; /* a host that moved is learned again */
      macs[i].seen = now;
      return;
    }
    if (macs[i].seen < macs[oldest].seen)
      oldest = i;
  }
  int i = free_slot >= 0 ? free_slot : oldest;
  memcpy(macs[i].mac, mac, 6);
  macs[i].port = port;
  macs[i].seen = now;
}

static int mac_lookup(const unsigned char *mac) {
  if (mac[0] & 1)
    return -1;
  for (int i = 0; i < MAC_TABLE; i++)
    if (macs[i].port >= 0 && memcmp(macs[i].mac, mac, 6) == 0)
      return macs[i].port;
  return -1;
}

/* ---- the link model ---- */

static void enqueue(int out, const unsigned char *data, uint32_t len, uint64_t arrival) {
  struct port *p = &ports[out];
  if (loss_pct > 0 && rng_uniform() * 100.0 < loss_pct) {
    p->dropped_loss++;
    return;
  }
  if (p->queued_bytes + len > queue_limit) {
    p->dropped_queue++;
    return;
  }
  double d = delay_ms * 1e6;
  if (jitter_ms > 0)
    d += (rng_uniform() * 2.0 - 1.0) * jitter_ms * 1e6;
  uint64_t depart = arrival + (d > 0 ? (uint64_t)d : 0);
  if (depart < p->last_depart)
    depart = p->last_depart; /* FIFO per port */
  if (rate_mbit > 0) {
    uint32_t wire = len - VNET_HLEN; /* the Ethernet frame, as netem counts it */
    depart += (uint64_t)((double)wire * 8.0 * 1e3 / rate_mbit); /* ns at R Mbit/s */
  }
  struct frame *f = malloc(sizeof *f + len);
  if (!f) {
    p->dropped_queue++;
    return;
  }
  f->depart = depart;
  f->seq = seq_next++;
  f->port = out;
  f->len = len;
  memcpy(f->data, data, len);
  if (heap_push(f) < 0) {
    free(f);
    p->dropped_queue++;
    return;
  }
  p->last_depart = depart;
  p->queued_bytes += len;
}

static void send_due(uint64_t now) {
  while (heap_n && heap[0]->depart <= now) {
    struct frame *f = heap_pop();
    struct port *p = &ports[f->port];
    p->queued_bytes -= f->len;
    ssize_t n;
    do
      n = send(p->fd, f->data, f->len, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
      p->tx_errors++; /* the link is down (link_cut), or the peer's backlog is full */
    } else {
      p->frames_out++;
      p->bytes_out += f->len - VNET_HLEN;
    }
    free(f);
  }
}

static void receive(int in) {
  static unsigned char buf[RX_BUF];
  struct port *p = &ports[in];
  for (int k = 0; k < RX_BATCH; k++) {
    char ctrl[CMSG_SPACE(sizeof(struct timespec))];
    struct iovec iov = {buf, sizeof buf};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof ctrl};
    ssize_t n = recvmsg(p->fd, &msg, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return;
      if (errno != EINTR)
        p->rx_errors++; /* ENETDOWN after the port went down, EINVAL for an odd GSO frame */
      return;
    }
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    if ((size_t)n > sizeof buf || n < VNET_HLEN + ETH_HLEN || (msg.msg_flags & MSG_TRUNC)) {
      p->rx_errors++;
      continue;
    }
    /* arrival = the kernel's receive timestamp, on the monotonic clock */
    uint64_t arrival = now;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
        struct timespec ts;
        memcpy(&ts, CMSG_DATA(c), sizeof ts);
        uint64_t rt = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        uint64_t rnow = clock_ns(CLOCK_REALTIME);
        if (rt <= rnow && rnow - rt < 1000000000ull)
          arrival = now - (rnow - rt);
      }
    }
    /* the virtio_net_hdr: flags in byte 0, gso_type in byte 1 */
    if (buf[1] != 0 || (buf[0] & VNET_F_NEEDS_CSUM))
      p->offload_frames++;
    buf[0] &= (unsigned char)~VNET_F_DATA_VALID;
    uint32_t len = (uint32_t)n;
    const unsigned char *eth = buf + VNET_HLEN;
    p->frames_in++;
    p->bytes_in += len - VNET_HLEN;
    mac_learn(eth + 6, in, now);
    int out = mac_lookup(eth);
    if (out == in)
      continue; /* both ends behind the same port */
    if (out >= 0) {
      enqueue(out, buf, len, arrival);
    } else {
      for (int i = 0; i < nports; i++)
        if (i != in)
          enqueue(i, buf, len, arrival);
    }
  }
}

/* ---- stats ---- */

static void write_stats(void) {
  if (!stats_path)
    return;
  size_t plen = strlen(stats_path);
  char *tmp = malloc(plen + 8);
  if (!tmp)
    return;
  snprintf(tmp, plen + 8, "%s.tmp", stats_path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "wan_switch: %s: %s\n", tmp, strerror(errno));
    free(tmp);
    return;
  }
  fprintf(f, "{\"delay_ms\": %g, \"jitter_ms\": %g, \"loss_pct\": %g, \"rate_mbit\": %g, \"seed\": %llu,\n",
          delay_ms, jitter_ms, loss_pct, rate_mbit, (unsigned long long)seed);
  fprintf(f, " \"pending_frames\": %zu,\n \"ports\": [\n", heap_n);
  for (int i = 0; i < nports; i++) {
    struct port *p = &ports[i];
    struct tpacket_stats st = {0};
    socklen_t sl = sizeof st;
    if (getsockopt(p->fd, SOL_PACKET, PACKET_STATISTICS, &st, &sl) < 0)
      memset(&st, 0, sizeof st);
    fprintf(f,
            "  {\"name\": \"%s\", \"frames_in\": %llu, \"bytes_in\": %llu, \"frames_out\": %llu, "
            "\"bytes_out\": %llu, \"dropped_loss\": %llu, \"dropped_queue\": %llu, \"tx_errors\": %llu, "
            "\"rx_errors\": %llu, \"socket_drops\": %u, \"offload_frames\": %llu}%s\n",
            p->name, (unsigned long long)p->frames_in, (unsigned long long)p->bytes_in,
            (unsigned long long)p->frames_out, (unsigned long long)p->bytes_out,
            (unsigned long long)p->dropped_loss, (unsigned long long)p->dropped_queue,
            (unsigned long long)p->tx_errors, (unsigned long long)p->rx_errors, st.tp_drops,
            (unsigned long long)p->offload_frames, i + 1 < nports ? "," : "");
  }
  fprintf(f, " ]}\n");
  if (fclose(f) != 0 || rename(tmp, stats_path) != 0)
    fprintf(stderr, "wan_switch: writing %s: %s\n", stats_path, strerror(errno));
  free(tmp);
}

/* ---- offloads ---- */

static int ethtool_value(int fd, const char *ifname, uint32_t cmd, uint32_t *val) {
  struct ethtool_value ev = {.cmd = cmd, .data = *val};
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
  ifr.ifr_data = (char *)&ev;
  if (ioctl(fd, SIOCETHTOOL, &ifr) < 0)
    return -1;
  *val = ev.data;
  return 0;
}

static int offloads_off(int argc, char **argv) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) {
    perror("wan_switch: socket");
    return 1;
  }
  static const struct {
    uint32_t set, get;
    const char *what;
  } feats[] = {
      {ETHTOOL_SGRO, ETHTOOL_GGRO, "gro"},      {ETHTOOL_SGSO, ETHTOOL_GGSO, "gso"},
      {ETHTOOL_STSO, ETHTOOL_GTSO, "tso"},      {ETHTOOL_SSG, ETHTOOL_GSG, "sg"},
      {ETHTOOL_STXCSUM, ETHTOOL_GTXCSUM, "tx"},
  };
  int rc = 0;
  for (int a = 0; a < argc; a++) {
    for (size_t k = 0; k < sizeof feats / sizeof feats[0]; k++) {
      uint32_t v = 0;
      if (ethtool_value(fd, argv[a], feats[k].get, &v) == 0 && v == 0)
        continue;
      v = 0;
      if (ethtool_value(fd, argv[a], feats[k].set, &v) < 0 && errno != EOPNOTSUPP) {
        fprintf(stderr, "wan_switch: %s: turning %s off: %s\n", argv[a], feats[k].what, strerror(errno));
        rc = 1;
        continue;
      }
      v = 0;
      if (ethtool_value(fd, argv[a], feats[k].get, &v) == 0 && v != 0) {
        fprintf(stderr, "wan_switch: %s: %s is still on\n", argv[a], feats[k].what);
        rc = 1;
      }
    }
  }
  close(fd);
  return rc;
}

/* ---- setup ---- */

static int open_port(struct port *p, const char *name) {
  snprintf(p->name, sizeof p->name, "%s", name);
  p->ifindex = (int)if_nametoindex(name);
  if (!p->ifindex) {
    fprintf(stderr, "wan_switch: no interface %s\n", name);
    return -1;
  }
  p->fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (p->fd < 0) {
    fprintf(stderr, "wan_switch: packet socket: %s\n", strerror(errno));
    return -1;
  }
  int one = 1, bufsz = 8 << 20;
  if (setsockopt(p->fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) < 0) {
    fprintf(stderr, "wan_switch: %s: PACKET_VNET_HDR: %s\n", name, strerror(errno));
    return -1;
  }
  if (setsockopt(p->fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) < 0) {
    fprintf(stderr, "wan_switch: %s: PACKET_IGNORE_OUTGOING: %s\n", name, strerror(errno));
    return -1;
  }
  if (setsockopt(p->fd, SOL_SOCKET, SO_RCVBUFFORCE, &bufsz, sizeof bufsz) < 0)
    (void)setsockopt(p->fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);
  if (setsockopt(p->fd, SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof bufsz) < 0)
    (void)setsockopt(p->fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
  (void)setsockopt(p->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
  struct sockaddr_ll sll;
  memset(&sll, 0, sizeof sll);
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = p->ifindex;
  if (bind(p->fd, (struct sockaddr *)&sll, sizeof sll) < 0) {
    fprintf(stderr, "wan_switch: bind %s: %s\n", name, strerror(errno));
    return -1;
  }
  struct packet_mreq mr;
  memset(&mr, 0, sizeof mr);
  mr.mr_ifindex = p->ifindex;
  mr.mr_type = PACKET_MR_PROMISC;
  if (setsockopt(p->fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) < 0) {
    fprintf(stderr, "wan_switch: %s: promiscuous: %s\n", name, strerror(errno));
    return -1;
  }
  /* frames that arrived before the bind (unfiltered) are dropped */
  unsigned char junk[64];
  while (recv(p->fd, junk, sizeof junk, MSG_DONTWAIT | MSG_TRUNC) >= 0) {
  }
  return 0;
}

static int parse_double(const char *s, const char *opt, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || v < 0 || v != v) {
    fprintf(stderr, "wan_switch: %s: not a number >= 0: %s\n", opt, s);
    return -1;
  }
  *out = v;
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: wan_switch [--delay-ms D] [--jitter-ms J] [--loss PCT] [--rate-mbit R] [--queue-kb K]\n"
                  "                  [--seed S] [--stats FILE] [--ready FILE] IFACE...\n"
                  "       wan_switch --offloads-off IFACE...\n");
}

int main(int argc, char **argv) {
  enum { O_DELAY = 1, O_JITTER, O_LOSS, O_RATE, O_QUEUE, O_SEED, O_STATS, O_READY, O_OFFLOADS, O_HELP };
  static const struct option opts[] = {
      {"delay-ms", required_argument, NULL, O_DELAY},   {"jitter-ms", required_argument, NULL, O_JITTER},
      {"loss", required_argument, NULL, O_LOSS},        {"rate-mbit", required_argument, NULL, O_RATE},
      {"queue-kb", required_argument, NULL, O_QUEUE},   {"seed", required_argument, NULL, O_SEED},
      {"stats", required_argument, NULL, O_STATS},      {"ready", required_argument, NULL, O_READY},
      {"offloads-off", no_argument, NULL, O_OFFLOADS},  {"help", no_argument, NULL, O_HELP},
      {NULL, 0, NULL, 0},
  };
  const char *ready_path = NULL;
  int offloads = 0, c;
  double q;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case O_DELAY:
      if (parse_double(optarg, "--delay-ms", &delay_ms) < 0)
        return 2;
      break;
    case O_JITTER:
      if (parse_double(optarg, "--jitter-ms", &jitter_ms) < 0)
        return 2;
      break;
    case O_LOSS:
      if (parse_double(optarg, "--loss", &loss_pct) < 0 || loss_pct > 100) {
        fprintf(stderr, "wan_switch: --loss takes a percentage, 0 to 100\n");
        return 2;
      }
      break;
    case O_RATE:
      if (parse_double(optarg, "--rate-mbit", &rate_mbit) < 0)
        return 2;
      break;
    case O_QUEUE:
      if (parse_double(optarg, "--queue-kb", &q) < 0 || q < 2)
        return 2;
      queue_limit = (uint64_t)(q * 1024);
      break;
    case O_SEED:
      seed = strtoull(optarg, NULL, 0);
      break;
    case O_STATS:
      stats_path = optarg;
      break;
    case O_READY:
      ready_path = optarg;
      break;
    case O_OFFLOADS:
      offloads = 1;
      break;
    default:
      usage();
      return c == O_HELP ? 0 : 2;
    }
  }
  if (optind >= argc) {
    usage();
    return 2;
  }
  if (offloads)
    return offloads_off(argc - optind, argv + optind);
  if (argc - optind > MAX_PORTS) {
    fprintf(stderr, "wan_switch: at most %d ports\n", MAX_PORTS);
    return 2;
  }

  /* the signals are only let in while waiting in ppoll, so none is missed */
  sigset_t block, waitmask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGUSR1);
  sigprocmask(SIG_BLOCK, &block, &waitmask);
  sigdelset(&waitmask, SIGTERM);
  sigdelset(&waitmask, SIGINT);
  sigdelset(&waitmask, SIGUSR1);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* 1 us instead of 50 us */
  /* woken ahead of busier processes on a loaded machine (best effort: root
     only; it sleeps between frames, so it takes little from them) */
  (void)setpriority(PRIO_PROCESS, 0, -10);

  rng_seed(seed);
  for (int i = 0; i < MAC_TABLE; i++)
    macs[i].port = -1;
  struct pollfd pfd[MAX_PORTS];
  for (int i = optind; i < argc; i++) {
    struct port *p = &ports[nports];
    if (open_port(p, argv[i]) < 0)
      return 1;
    pfd[nports].fd = p->fd;
    pfd[nports].events = POLLIN;
    nports++;
  }
  if (ready_path) {
    FILE *f = fopen(ready_path, "w");
    if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) {
      fprintf(stderr, "wan_switch: %s: %s\n", ready_path, strerror(errno));
      return 1;
    }
  }

  while (!stop_flag) {
    if (dump_flag) {
      dump_flag = 0;
      write_stats();
    }
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    send_due(now);
    struct timespec ts, *tsp = NULL;
    if (heap_n) {
      uint64_t wait = heap[0]->depart > now ? heap[0]->depart - now : 0;
      ts.tv_sec = (time_t)(wait / 1000000000ull);
      ts.tv_nsec = (long)(wait % 1000000000ull);
      tsp = &ts;
    }
    int n = ppoll(pfd, (nfds_t)nports, tsp, &waitmask);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      perror("wan_switch: ppoll");
      break;
    }
    for (int i = 0; i < nports && n > 0; i++) {
      if (pfd[i].revents) {
        receive(i);
        n--;
      }
    }
  }
  write_stats();
  while (heap_n)
    free(heap_pop());
  free(heap);
  for (int i = 0; i < nports; i++)
    close(ports[i].fd);
  return 0;
}
