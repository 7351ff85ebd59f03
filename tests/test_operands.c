/* test_operands: the OPERANDS tables in selscan.h's comments (the scan's, the gradients' and the
   step's) against the operand X-macros the validation runs on (SELSCAN__SCAN_OPERANDS,
   SELSCAN__GRAD_OPERANDS, SELSCAN__STEP_OPERANDS): every operand documented once per variant,
   nothing documented that the tables lack, each row's logical shape evaluated from the
   SELSCAN__DIMS_* macros (sizes named in the text: batch, dim, L, N, n_groups, rows, n_cache), its
   dtype (T / f32; B, C and dB, dC in a variable and a fixed row; "f32 / T" for the step's operands
   a flag makes T, dtype PRM / STT, with the flag named in the row) and "optional" exactly for the
   optional operands. Gradient rows written "like u" must have u's shape and dtype class. */
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include "common.h"

typedef struct opd { const char *name, *need, *dims, *dtype; } opd;
#define ROW(c, field, ten, io, need, dims, dtype) {#field, #need, #dims, #dtype},
static const opd scan_ops[] = {SELSCAN__SCAN_OPERANDS(ROW, 0)};
static const opd grad_ops[] = {SELSCAN__GRAD_OPERANDS(ROW, 0)};
static const opd step_ops[] = {SELSCAN__STEP_OPERANDS(ROW, 0)};
#undef ROW

/* the sizes, distinct primes, so a shape's text maps to one list of sizes */
typedef struct sizes { int64_t batch, dim, L, N, G, rows, ncache; } sizes;
static const sizes SZ = {2, 3, 5, 7, 11, 13, 17};

/* rank and sizes of a dims token, from the library's macros */
static int dims_of(const char *tok, int64_t n[5]) {
    const sizes *q = &SZ;
#define D(T)                                                                         \
    if (strcmp(tok, #T) == 0) {                                                      \
        const int64_t v[5] = {SELSCAN__DIMS_##T(q)};                                 \
        memcpy(n, v, sizeof v);                                                      \
        return 1;                                                                    \
    }
    D(SEQ) D(BC) D(ROWS) D(DN) D(DIM) D(TOK) D(BC1) D(CACHE)
#undef D
    return 0;
}

/* rank and sizes of a shape's text "(batch, n_groups, N, L)" */
static int dims_text(const char *t, int64_t n[5]) {
    char buf[128], *tok, *save = NULL;
    int k = 0;
    size_t len = strlen(t);
    if (len < 2 || t[0] != '(' || t[len - 1] != ')' || len - 2 >= sizeof buf) return 0;
    memcpy(buf, t + 1, len - 2);
    buf[len - 2] = 0;
    for (k = 0; k < 5; k++) n[k] = 1;
    k = 0;
    for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int64_t v = strcmp(tok, "batch") == 0 ? SZ.batch : strcmp(tok, "dim") == 0 ? SZ.dim : strcmp(tok, "L") == 0 ? SZ.L
                  : strcmp(tok, "N") == 0 ? SZ.N : strcmp(tok, "n_groups") == 0 ? SZ.G : strcmp(tok, "rows") == 0 ? SZ.rows
                  : strcmp(tok, "n_cache") == 0 ? SZ.ncache : -1;
        if (v < 0 || k >= 4) return 0;
        n[1 + k++] = v;
    }
    n[0] = k;
    return k > 0;
}

static const opd *find(const opd *t, int n, const char *name) {
    int i;
    for (i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) return &t[i];
    return NULL;
}

static char header[1 << 20];

/* the table's lines: from the line holding `start` up to (not including) the first line holding
   `stop` */
static void check_block(const char *what, const char *start, const char *stop, const opd *t, int nt, const opd *like_t,
                        int nlike) {
    const char *p = strstr(header, start), *end;
    int seen[32][2], i, rows = 0;
    memset(seen, 0, sizeof seen);
    if (!CHECK(p != NULL, "%s: '%s' found in selscan.h", what, start)) return;
    p = strchr(p, '\n') + 1;
    while (strncmp(p, " *\n", 3) == 0) p += 3; /* blank comment lines before the rows */
    end = strstr(p, stop);
    if (!CHECK(end != NULL, "%s: end marker '%s'", what, stop)) return;
    while (p < end) {
        char line[256], col[4][256], *c = line;
        const char *nl = strchr(p, '\n');
        size_t len = (size_t)(nl - p);
        int ncol = 0, fixed = -1;
        if (len >= sizeof line) len = sizeof line - 1;
        memcpy(line, p, len);
        line[len] = 0;
        p = nl + 1;
        if (strncmp(c, " *", 2) == 0) c += 2;
        while (*c == ' ') c++;
        if (!*c) continue;
        /* columns: separated by two or more spaces */
        while (*c && ncol < 4) {
            char *e = strstr(c, "  ");
            size_t l = e ? (size_t)(e - c) : strlen(c);
            memcpy(col[ncol], c, l);
            col[ncol][l] = 0;
            ncol++;
            c += l;
            while (*c == ' ') c++;
        }
        if (ncol < 3) { CHECK(0, "%s: row '%s' has %d columns", what, line, ncol); continue; }
        if (ncol == 3) col[3][0] = 0;
        rows++;
        {
            char *v = strstr(col[0], " (variable)"), *f = strstr(col[0], " (SELSCAN_FIXED_*)"), *nm, *save = NULL;
            if (v) { *v = 0; fixed = 0; }
            if (f) { *f = 0; fixed = 1; }
            for (nm = strtok_r(col[0], ", ", &save); nm; nm = strtok_r(NULL, ", ", &save)) {
                const opd *o = find(t, nt, nm);
                const int fx = strcmp(o ? o->dtype : "", "FIXB") == 0 || strcmp(o ? o->dtype : "", "FIXC") == 0;
                int64_t want[5], got[5];
                if (!CHECK(o != NULL, "%s: documented operand '%s' is in the table", what, nm)) continue;
                if (strncmp(col[1], "like ", 5) == 0) { /* a gradient "like u" / "like A, D": both variants */
                    char refs[256], *r, *s2 = NULL;
                    int ok = 0;
                    size_t rl = strlen(col[1] + 5);
                    if (rl >= sizeof refs) rl = sizeof refs - 1;
                    memcpy(refs, col[1] + 5, rl);
                    refs[rl] = 0;
                    for (r = strtok_r(refs, ", ", &s2); r; r = strtok_r(NULL, ", ", &s2)) {
                        const opd *ro = find(like_t, nlike, r);
                        ok |= ro && strcmp(ro->dims, o->dims) == 0 && strcmp(ro->dtype, o->dtype) == 0;
                    }
                    CHECK(ok, "%s: %s is '%s' (%s, %s)", what, nm, col[1], o->dims, o->dtype);
                    CHECK(fixed < 0, "%s: %s: a 'like' row has no variant", what, nm);
                    seen[o - t][0]++;
                    if (fx) seen[o - t][1]++;
                } else {
                    CHECK(fx ? fixed >= 0 : fixed < 0, "%s: %s documented %s", what, nm,
                          fx ? "in a variable and a fixed row" : "without a variant");
                    seen[o - t][fixed > 0]++;
                    const int is_fixed_form = fixed > 0;
                    CHECK(dims_of(is_fixed_form ? "DN" : o->dims, want) && dims_text(col[1], got) &&
                              memcmp(want, got, sizeof want) == 0,
                          "%s: %s documented %s, the table says %s", what, nm, col[1], is_fixed_form ? "DN" : o->dims);
                    /* f32, T with a flag: PRM (SELSCAN_STEP_D_T / _DELTA_BIAS_T), STT (SELSCAN_STEP_STATE_T) */
                    const char *flag = strcmp(o->dtype, "PRM") == 0 ? "T with SELSCAN_STEP_D_T / _DELTA_BIAS_T"
                                       : strcmp(o->dtype, "STT") == 0 ? "T with SELSCAN_STEP_STATE_T" : NULL;
                    CHECK(strcmp(col[2], strcmp(o->dtype, "F32") == 0 || is_fixed_form ? "f32" : flag ? "f32 / T" : "T") == 0,
                          "%s: %s documented dtype '%s', the table says %s%s", what, nm, col[2], o->dtype,
                          is_fixed_form ? " (fixed: f32)" : "");
                    CHECK(!flag || strstr(col[3], flag) != NULL, "%s: %s (f32 / T) names its flag: '%s'", what, nm, col[3]);
                }
                { /* "optional": the whole row, or "<name> optional" */
                    char named[64];
                    int opt;
                    snprintf(named, sizeof named, "%s optional", nm);
                    opt = strncmp(col[3], "optional", 8) == 0 || strstr(col[3], named) != NULL;
                    CHECK(opt == (strcmp(o->need, "OPT") == 0), "%s: %s documented %s, the table says %s", what, nm,
                          opt ? "optional" : "required", o->need);
                }
            }
        }
    }
    CHECK(rows > 0, "%s: rows found", what);
    for (i = 0; i < nt; i++) {
        const int fx = strcmp(t[i].dtype, "FIXB") == 0 || strcmp(t[i].dtype, "FIXC") == 0;
        CHECK(seen[i][0] == 1 && seen[i][1] == (fx ? 1 : 0), "%s: %s documented once%s (%d, %d)", what, t[i].name,
              fx ? " in each variant" : "", seen[i][0], seen[i][1]);
    }
}

int main(void) {
    char path[512];
    const char *slash = strrchr(__FILE__, '/');
    FILE *f;
    size_t n;
    tc_init("test_operands");
    snprintf(path, sizeof path, "%.*s../selscan.h", slash ? (int)(slash - __FILE__ + 1) : 0, __FILE__);
    f = fopen(path, "rb");
    if (!f) f = fopen("selscan.h", "rb");
    if (!CHECK(f != NULL, "open %s", path)) return tc_finish();
    n = fread(header, 1, sizeof header - 1, f);
    fclose(f);
    header[n] = 0;
    CHECK(n > 0 && n < sizeof header - 1, "selscan.h read whole (%zu bytes)", n);
    /* the scan's table holds the problem's operands and the gradients' ("like ..." rows) */
    {
        opd both[32];
        int i, nb = 0;
        for (i = 0; i < (int)(sizeof scan_ops / sizeof scan_ops[0]); i++) both[nb++] = scan_ops[i];
        for (i = 0; i < (int)(sizeof grad_ops / sizeof grad_ops[0]); i++) both[nb++] = grad_ops[i];
        check_block("OPERANDS", " * OPERANDS: logical shapes", " *\n", both, nb, scan_ops,
                    (int)(sizeof scan_ops / sizeof scan_ops[0]));
    }
    check_block("STEP OPERANDS", "STEP OPERANDS:", "     state_index optional", step_ops,
                (int)(sizeof step_ops / sizeof step_ops[0]), step_ops, (int)(sizeof step_ops / sizeof step_ops[0]));
    return tc_finish();
}
