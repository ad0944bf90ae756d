/* Subcommands of the rlpost driver. Each returns the process exit code:
 * 0 success, 2 bad arguments or configuration, 1 any other failure. */
#ifndef RLPOST_COMMANDS_H
#define RLPOST_COMMANDS_H

#define EXIT_USAGE 2

int cmd_version(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logprobs(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_weights_serve(int argc, char **argv);
int cmd_task(int argc, char **argv);
int cmd_reward(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_rollout_worker(int argc, char **argv);
int cmd_export(int argc, char **argv);

#endif
