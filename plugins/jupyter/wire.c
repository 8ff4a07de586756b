/* termd-jupyter's Jupyter wire (messaging protocol 5.3): the connection's HMAC-SHA256 key and
 * session, signing, sending a message on a ZeroMQ socket and receiving and checking one. */
#include "jupyter.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

struct jwire W;

/* ---------------------------------------------------------------- Jupyter wire */

void iso_date(char *out, size_t n) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char t[32];
    strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, n, "%s.%06ldZ", t, ts.tv_nsec / 1000);
}

void sign(const char *parts[4], char hex[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    size_t total = 0;
    for (int i = 0; i < 4; i++) total += strlen(parts[i]);
    char *cat = xmalloc(total + 1), *p = cat;
    for (int i = 0; i < 4; i++) { size_t l = strlen(parts[i]); memcpy(p, parts[i], l); p += l; }
    HMAC(EVP_sha256(), W.key, (int)strlen(W.key), (unsigned char *)cat, total, md, &mdlen);
    free(cat);
    for (unsigned i = 0; i < mdlen && i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
    hex[64] = 0;
}

/* Send one message; msg_id_out receives its id. Returns 0 or -1. */
int send_msg(void *sock, const char *msg_type, cJSON *content, char *msg_id_out, size_t idn) {
    char msg_id[96], date[64];
    snprintf(msg_id, sizeof msg_id, "%s_%lu", W.session, ++W.msg_seq);
    if (!strcmp(msg_type, "kernel_info_request")) snprintf(msg_id, sizeof msg_id, "%s_kir_%lu", W.session, W.msg_seq);
    iso_date(date, sizeof date);
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "msg_id", msg_id);
    cJSON_AddStringToObject(h, "session", W.session);
    cJSON_AddStringToObject(h, "username", "termd");
    cJSON_AddStringToObject(h, "date", date);
    cJSON_AddStringToObject(h, "msg_type", msg_type);
    cJSON_AddStringToObject(h, "version", "5.3");
    char *hs = cJSON_PrintUnformatted(h), *cs = cJSON_PrintUnformatted(content);
    cJSON_Delete(h);
    const char *parts[4] = { hs, "{}", "{}", cs };
    char sig[65];
    sign(parts, sig);
    const char *frames[6] = { "<IDS|MSG>", sig, hs, "{}", "{}", cs };
    int rc = 0;
    for (int i = 0; i < 6 && rc == 0; i++)
        if (zmq_send(sock, frames[i], strlen(frames[i]), i < 5 ? ZMQ_SNDMORE : 0) < 0) rc = -1;
    if (rc) logmsg("zmq_send %s: %s", msg_type, zmq_strerror(zmq_errno()));
    free(hs);
    free(cs);
    if (msg_id_out) snprintf(msg_id_out, idn, "%s", msg_id);
    return rc;
}


/* Receive one whole multipart message without waiting. 1: got one (check m->content), 0: none. */
int recv_msg(void *sock, kmsg_t *m) {
    memset(m, 0, sizeof *m);
    zmq_msg_t f[8];
    int nf = 0, more = 1;
    int delim = -1;
    bool first = true;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, first ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&part);
            if (first) return 0;
            break;
        }
        first = false;
        more = zmq_msg_more(&part);
        if (delim < 0) {
            if (zmq_msg_size(&part) == 9 && !memcmp(zmq_msg_data(&part), "<IDS|MSG>", 9)) delim = 0;
            zmq_msg_close(&part);
            continue;
        }
        if (nf < 5) f[nf++] = part;   /* signature, header, parent, metadata, content */
        else zmq_msg_close(&part);     /* buffers */
    }
    int ok = 0;
    if (delim == 0 && nf == 5) {
        char *s[5];
        for (int i = 0; i < 5; i++) {
            size_t n = zmq_msg_size(&f[i]);
            s[i] = xmalloc(n + 1);
            memcpy(s[i], zmq_msg_data(&f[i]), n);
            s[i][n] = 0;
        }
        const char *parts[4] = { s[1], s[2], s[3], s[4] };
        char sig[65];
        sign(parts, sig);
        if (strlen(s[0]) != 64 || CRYPTO_memcmp(sig, s[0], 64)) {
            logmsg("dropped a kernel message with a bad signature");
        } else {
            cJSON *h = cJSON_Parse(s[1]), *p = cJSON_Parse(s[2]);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "msg_type");
            const cJSON *pid = cJSON_GetObjectItemCaseSensitive(p, "msg_id");
            if (cJSON_IsString(t)) {
                snprintf(m->msg_type, sizeof m->msg_type, "%s", t->valuestring);
                if (cJSON_IsString(pid)) snprintf(m->parent, sizeof m->parent, "%s", pid->valuestring);
                m->content = cJSON_Parse(s[4]);
                if (!m->content) m->content = cJSON_CreateObject();
                ok = 1;
            }
            cJSON_Delete(h);
            cJSON_Delete(p);
        }
        for (int i = 0; i < 5; i++) free(s[i]);
    }
    for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
    (void)ok;
    return 1;   /* a message was taken off the socket; m->content is set only if it was valid */
}

