/* termd-jupyter's internal header, one section per file in layer order: each file calls only the
 * sections above its own (util ← wire ← kernel ← termd-jupyter.c, the requests and the main loop). */
#ifndef TERMD_JUPYTER_H
#define TERMD_JUPYTER_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define DEFAULT_TIMEOUT   120.0
#define START_LIMIT       60.0   /* seconds for a kernel to answer kernel_info with iopub live */
#define INTERNAL_LIMIT    60.0   /* seconds for our own setup cells */
#define INTERRUPT_GRACE   5.0    /* seconds after SIGINT before the kernel is killed */
#define IOPUB_RETRY       0.2    /* resend kernel_info_request when iopub stays silent this long */
#define MAX_LINE          (64u << 20)
#define OUT_HEAD          (512u << 10)
#define OUT_TAIL          (512u << 10)
#define MAX_IMAGES_BYTES  (16u << 20)
#define ERR_TAIL          4096

static const char NO_OUTPUT[] = "[Code executed successfully with no output]";

/* ---- util.c ---- */
typedef struct { char *p; size_t len, cap; } buf_t;
void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
double now_s(void);
void buf_add(buf_t *b, const char *s, size_t n);
void buf_adds(buf_t *b, const char *s);
void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(buf_t *b);
const char *buf_str(const buf_t *b);
void utf8_clean(const char *s, size_t n, buf_t *out);   /* invalid UTF-8 → U+FFFD */
void strip_ansi(buf_t *b);
void rstrip(buf_t *b);
void write_all(int fd, const char *s, size_t n);
void emit(cJSON *o);                                    /* one answer line on stdout; frees o */
cJSON *id_copy(const cJSON *id);
void answer_error(const cJSON *id, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- wire.c ---- */
struct jwire {
    char session[40];
    unsigned long msg_seq;
    char key[65];            /* the connection's HMAC key, hex */
};
extern struct jwire W;
typedef struct { char msg_type[64]; char parent[96]; cJSON *content; } kmsg_t;
void iso_date(char *out, size_t n);
void sign(const char *parts[4], char hex[65]);
int send_msg(void *sock, const char *msg_type, cJSON *content, char *msg_id_out, size_t idn);
int recv_msg(void *sock, kmsg_t *m);    /* 0 ok (m->content owned), -1 nothing or a bad message */

/* ---- kernel.c ---- */
enum { K_NONE, K_STARTING, K_READY };
enum { ST_SETUP, ST_SKILLS, ST_INIT, ST_CHDIR, ST_CELL };

struct kstate {
    void *ctx;
    char rundir[128];
    bool own_rundir;
    char *python;            /* resolved interpreter path, NULL until probed */
    char *skills_dir;        /* agentskills python folder or NULL */
    /* the current kernel */
    int state;
    pid_t pid;
    int gen;
    char conn[192], base[192];
    void *shell, *control, *iopub;
    int errfd;               /* the kernel's stderr/stdout pipe */
    char errtail[ERR_TAIL + 1];
    double start_deadline, kir_sent;
    bool kir_reply, iopub_live;
    char *exe;               /* sys.executable reported by the kernel */
    char *cwd_pushed;        /* the cwd we last put the kernel in */
    bool need_setup, need_skills, need_init;
    /* what the next kernel start must say */
    char *death_note;
    char *last_cwd;          /* the kernel's cwd after the last cell */
};
extern struct kstate K;
char *which(const char *name);
void child_signals_default(void);
char *find_python(buf_t *why);
void close_sockets(void);
void remove_kernel_files(void);
int kernel_start(const char *cwd, buf_t *why);
void read_kernel_stderr(void);
void last_err_line(char *out, size_t n);
void kernel_reap(int status, char *how, size_t hn);
void kernel_kill(void);
char *proc_cwd(void);

#endif
