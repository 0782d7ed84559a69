/* main.c - hpod entry point (being written). */
#include <stdio.h>

#include "hpo.h"

int main(void) {
    printf("hpod %s\n", HPO_VERSION);
    return 0;
}
