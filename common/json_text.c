/* json_text.c - JSON text with its reals in shortest round-trip form
 * (json_text.h). */
#include "json_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpo.h"

/* The shortest text of the real written at s (n bytes) into out (>= 32
 * bytes), or 0: keep s as it is. */
static size_t shortest(const char *s, size_t n, char *out) {
    char in[64];
    if (n >= sizeof in) return 0; /* not a %.17g real: leave it */
    memcpy(in, s, n);
    in[n] = '\0';
    double v = strtod(in, NULL);
    int len = 0;
    for (int p = 1; p <= 17; p++) {
        len = snprintf(out, 32, "%.*g", p, v);
        if (strtod(out, NULL) == v) break;
    }
    if (!strpbrk(out, ".eEn")) len += snprintf(out + len, 32 - (size_t)len, ".0");
    return (size_t)len;
}

char *hpo_json_text_shortest(char *text) {
    if (!text) return NULL;
    size_t n = strlen(text);
    char *out = hpo_xmalloc(n + 1);
    size_t o = 0;
    int in_string = 0;
    for (size_t i = 0; i < n;) {
        char c = text[i];
        if (in_string) {
            out[o++] = c;
            if (c == '\\' && i + 1 < n) out[o++] = text[++i];
            else if (c == '"') in_string = 0;
            i++;
        } else if (c == '"') {
            in_string = 1;
            out[o++] = text[i++];
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i, real = 0;
            while (j < n && strchr("+-0123456789.eE", text[j])) real |= strchr(".eE", text[j++]) != NULL;
            if (real) {
                char buf[32];
                size_t k = shortest(text + i, j - i, buf);
                if (k > 0 && k <= j - i) { /* never longer than what it replaces */
                    memcpy(out + o, buf, k);
                    o += k;
                    i = j;
                    continue;
                }
            }
            memcpy(out + o, text + i, j - i);
            o += j - i;
            i = j;
        } else {
            out[o++] = text[i++];
        }
    }
    out[o] = '\0';
    free(text);
    return out;
}
