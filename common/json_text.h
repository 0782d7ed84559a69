/*
 * json_text.h - JSON text with every real in its shortest form that reads
 * back to the same double (0.4, not jansson's %.17g 0.40000000000000002),
 * as Python's repr and JavaScript print them.
 *
 * Design notes
 * - jansson has no such mode, so the text it writes is rewritten: outside
 *   strings, each number with a fraction or an exponent is printed again
 *   with the fewest significant digits (1 to 17) that strtod maps to the
 *   same value; a real stays a real ("1.0", not "1"); integers and strings
 *   are left alone, and a number is never made longer.
 * - Text in, text out (no jansson here): hpod's answers (api_json_dumps)
 *   and the CLI's JSON output (cli_print_json, study export -o) share it,
 *   so what a client sends is what it reads back wherever it reads it.
 * Ownership: hpo_json_text_shortest takes a malloc'd text (json_dumps's)
 *   and returns a new malloc'd one (NULL for NULL); aborts on out-of-memory
 *   (hpo_xmalloc: the text is no larger than the one given).
 */
#ifndef HPO_JSON_TEXT_H
#define HPO_JSON_TEXT_H

/* text with its reals in shortest round-trip form; text is freed. */
char *hpo_json_text_shortest(char *text);

#endif
