/* trial_cancel.c - a trial cancelled without having run to its end (see
 * api_internal.h): a queued or running trial of a cancelled study, an
 * enqueued one still waiting at its study's max_seconds. Stored with its
 * trial_cancelled event, as a worker's end stores one, and the tuner told. */
#include <math.h>
#include <stdlib.h>

#include "api_internal.h"

int api_trial_cancel_for_study(api_ctx *ctx, api_study *st, const sto_trial *t) {
    return api_trial_cancel_why(ctx, st, t, "study cancelled");
}

int api_trial_cancel_why(api_ctx *ctx, api_study *st, const sto_trial *t, const char *why) {
    char *data = api_event_text(json_pack("{s:I, s:I, s:s, s:s}", "trial_id", (json_int_t)t->id, "number",
                                          (json_int_t)t->number, "state", "cancelled", "error", why));
    sto_event_in ev = {"trial_cancelled", data};
    int rc = sto_trial_finish_ev(ctx->db, t->id, STO_TRIAL_CANCELLED, NAN, NAN, 0, why, &ev);
    free(data);
    if (rc == 0 && st) tun_study_finish(st->tuner, t->number, TUN_TRIAL_FAILED, NAN);
    return rc;
}
